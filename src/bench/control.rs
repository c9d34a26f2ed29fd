//! The control channel of an experiment spread over a launcher's processes: JSON lines over
//! TCP between the driver (rank 0) and each rank, every line tagged with the job key, its
//! direction and its place in the stream. Only the job's processes can drive it (it can stop a
//! rank's node), and a line replayed, dropped or moved is refused.
//!
//! ```text
//! LINE = JSON ' ' hex(key.tag("control", [direction, counter, JSON]))
//! ```

use crate::transport::JobKey;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Why the channel failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The connection failed or closed.
    #[error("control channel: {0}")]
    Io(#[from] std::io::Error),
    /// A line that is not ours.
    #[error("control channel: {0}")]
    Bad(String),
}

/// Which way a line goes: the two directions are tagged apart, so a line cannot be reflected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Driver to rank.
    Down,
    /// Rank to driver.
    Up,
}

impl Direction {
    fn label(self) -> &'static [u8] {
        match self {
            Direction::Down => b"down",
            Direction::Up => b"up",
        }
    }
}

/// Longest line read: an event with a view of a million ranks fits.
const LINE_MAX: u64 = 16 << 20;

fn tag(key: &JobKey, dir: Direction, counter: u64, json: &str) -> String {
    key.tag(
        b"control",
        &[dir.label(), &counter.to_le_bytes(), json.as_bytes()],
    )
    .iter()
    .map(|b| format!("{b:02x}"))
    .collect()
}

/// The sending half.
pub struct ControlSender {
    stream: TcpStream,
    key: JobKey,
    dir: Direction,
    counter: u64,
}

/// The receiving half.
pub struct ControlReceiver {
    reader: BufReader<TcpStream>,
    key: JobKey,
    dir: Direction,
    counter: u64,
}

/// Both halves of a connection: lines sent go `out`, lines received come the other way.
pub fn split(
    stream: TcpStream,
    key: &JobKey,
    out: Direction,
) -> Result<(ControlSender, ControlReceiver), ControlError> {
    stream.set_nodelay(true)?;
    let back = match out {
        Direction::Down => Direction::Up,
        Direction::Up => Direction::Down,
    };
    Ok((
        ControlSender {
            stream: stream.try_clone()?,
            key: key.clone(),
            dir: out,
            counter: 0,
        },
        ControlReceiver {
            reader: BufReader::new(stream),
            key: key.clone(),
            dir: back,
            counter: 0,
        },
    ))
}

impl ControlSender {
    /// Send one message.
    pub fn send(&mut self, v: &serde_json::Value) -> Result<(), ControlError> {
        let json = v.to_string();
        let t = tag(&self.key, self.dir, self.counter, &json);
        self.counter += 1;
        writeln!(self.stream, "{json} {t}")?;
        Ok(())
    }
}

impl ControlReceiver {
    /// The next message, waiting at most `timeout` (`None`: as long as it takes).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<serde_json::Value, ControlError> {
        self.reader.get_ref().set_read_timeout(timeout)?;
        let mut line = String::new();
        let n = (&mut self.reader).take(LINE_MAX).read_line(&mut line)?;
        if n == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        let line = line.trim_end();
        let (json, t) = line
            .rsplit_once(' ')
            .ok_or_else(|| ControlError::Bad("a line without its tag".into()))?;
        let want = tag(&self.key, self.dir, self.counter, json);
        let same = want.len() == t.len()
            && want
                .bytes()
                .zip(t.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if !same {
            return Err(ControlError::Bad(format!(
                "line {} does not check (another job, or out of order)",
                self.counter
            )));
        }
        self.counter += 1;
        serde_json::from_str(json).map_err(|e| ControlError::Bad(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    /// A connected pair: what `down` sends, `up` receives.
    fn pair(down_key: &JobKey, up_key: &JobKey) -> (ControlSender, ControlReceiver) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        let (down, _) = split(a, down_key, Direction::Down).unwrap();
        let (_, up) = split(b, up_key, Direction::Up).unwrap();
        (down, up)
    }

    #[test]
    fn lines_go_through_in_order() {
        let key = JobKey::from_bytes([1; 32]);
        let (mut down, mut up) = pair(&key, &key);
        down.send(&serde_json::json!({"c": "start", "trial": 1}))
            .unwrap();
        down.send(&serde_json::json!({"c": "kill"})).unwrap();
        assert_eq!(up.recv(None).unwrap()["trial"], 1);
        assert_eq!(up.recv(None).unwrap()["c"], "kill");
    }

    #[test]
    fn another_keys_line_and_a_replayed_line_are_refused() {
        let key = JobKey::from_bytes([1; 32]);
        let (mut other, mut up) = pair(&JobKey::from_bytes([2; 32]), &key);
        other.send(&serde_json::json!({"c": "stop"})).unwrap();
        assert!(up.recv(None).is_err());
        let (mut down, mut up) = pair(&key, &key);
        let line = serde_json::json!({"c": "kill"});
        down.send(&line).unwrap();
        down.counter = 0; // the same line again, as a relay replaying it would
        down.send(&line).unwrap();
        assert!(up.recv(None).is_ok());
        assert!(up.recv(None).is_err(), "a replay");
    }
}
