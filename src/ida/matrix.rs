//! Small dense matrices over GF(2^8): the dispersal matrix and its inverted submatrices.

use super::gf256::{inv, mul};
use super::IdaError;

/// A row-major `rows × cols` matrix over GF(2^8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matrix {
    rows: usize,
    cols: usize,
    data: Vec<u8>,
}

impl Matrix {
    /// The zero matrix.
    pub fn zero(rows: usize, cols: usize) -> Self {
        Self {
            rows,
            cols,
            data: vec![0; rows * cols],
        }
    }

    /// The identity.
    pub fn identity(n: usize) -> Self {
        let mut m = Self::zero(n, n);
        for i in 0..n {
            m.set(i, i, 1);
        }
        m
    }

    /// Rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Element `(r, c)`.
    pub fn get(&self, r: usize, c: usize) -> u8 {
        self.data[r * self.cols + c]
    }

    /// Set element `(r, c)`.
    pub fn set(&mut self, r: usize, c: usize, v: u8) {
        self.data[r * self.cols + c] = v;
    }

    /// Row `r`.
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.cols..(r + 1) * self.cols]
    }

    /// The matrix made of the given rows, in that order.
    pub fn select_rows(&self, rows: &[usize]) -> Matrix {
        let mut m = Matrix::zero(rows.len(), self.cols);
        for (i, &r) in rows.iter().enumerate() {
            m.data[i * self.cols..(i + 1) * self.cols].copy_from_slice(self.row(r));
        }
        m
    }

    /// `self · other`.
    pub fn mul(&self, other: &Matrix) -> Matrix {
        assert_eq!(self.cols, other.rows, "dimension mismatch");
        let mut out = Matrix::zero(self.rows, other.cols);
        for r in 0..self.rows {
            for k in 0..self.cols {
                let a = self.get(r, k);
                if a == 0 {
                    continue;
                }
                for c in 0..other.cols {
                    let v = out.get(r, c) ^ mul(a, other.get(k, c));
                    out.set(r, c, v);
                }
            }
        }
        out
    }

    /// The inverse, by Gauss–Jordan elimination; [`IdaError::Singular`] if there is none.
    pub fn invert(&self) -> Result<Matrix, IdaError> {
        assert_eq!(self.rows, self.cols, "only square matrices invert");
        let n = self.rows;
        let mut a = self.clone();
        let mut b = Matrix::identity(n);
        for col in 0..n {
            let pivot = (col..n)
                .find(|&r| a.get(r, col) != 0)
                .ok_or(IdaError::Singular)?;
            if pivot != col {
                for c in 0..n {
                    a.data.swap(pivot * n + c, col * n + c);
                    b.data.swap(pivot * n + c, col * n + c);
                }
            }
            let scale = inv(a.get(col, col)).ok_or(IdaError::Singular)?;
            for c in 0..n {
                a.set(col, c, mul(a.get(col, c), scale));
                b.set(col, c, mul(b.get(col, c), scale));
            }
            for r in 0..n {
                let f = a.get(r, col);
                if r == col || f == 0 {
                    continue;
                }
                for c in 0..n {
                    a.set(r, c, a.get(r, c) ^ mul(f, a.get(col, c)));
                    b.set(r, c, b.get(r, c) ^ mul(f, b.get(col, c)));
                }
            }
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_times_matrix_is_identity() {
        // A Vandermonde matrix at distinct points is invertible.
        let n = 12;
        let mut m = Matrix::zero(n, n);
        for r in 0..n {
            for c in 0..n {
                m.set(r, c, crate::ida::gf256::pow(r as u8 + 1, c as u32));
            }
        }
        let i = m.invert().unwrap();
        assert_eq!(m.mul(&i), Matrix::identity(n));
        assert_eq!(i.mul(&m), Matrix::identity(n));
    }

    #[test]
    fn singular_matrix_is_an_error() {
        let mut m = Matrix::zero(3, 3);
        for c in 0..3 {
            m.set(0, c, c as u8 + 1);
            m.set(1, c, c as u8 + 1); // two equal rows
            m.set(2, c, 9);
        }
        assert!(matches!(m.invert(), Err(IdaError::Singular)));
    }
}
