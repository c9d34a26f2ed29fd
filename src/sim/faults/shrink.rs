//! Shrinking a failing schedule: drop one fault, zero one rate, halve one duration, keep the
//! change if the schedule still fails, until no single change does (a local minimum, found
//! within a bounded number of runs).

use super::{execute, Fault, Schedule};
use crate::sim::faultnet::LinkFaults;

/// Most runs one shrink may spend.
const MAX_RUNS: u32 = 400;

/// The smallest schedule found, from `s`, that still fails a check.
pub fn shrink(s: &Schedule) -> Schedule {
    let mut best = s.clone();
    let mut runs = 0;
    'outer: loop {
        for cand in smaller(&best) {
            if runs == MAX_RUNS {
                break 'outer;
            }
            runs += 1;
            if !execute(&cand).violations.is_empty() {
                best = cand;
                continue 'outer;
            }
        }
        break;
    }
    best
}

/// Every schedule one step smaller than `s`, the biggest cuts first.
fn smaller(s: &Schedule) -> Vec<Schedule> {
    let mut out = Vec::new();
    let n = &s.net;
    if [n.loss, n.dup, n.reorder, n.tail].iter().any(|&r| r > 0.0) {
        out.push(Schedule {
            net: LinkFaults::NONE,
            ..s.clone()
        });
    }
    for i in 0..s.faults.len() {
        let mut c = s.clone();
        c.faults.remove(i);
        out.push(c);
    }
    let net = s.net;
    let rates: [fn(&mut LinkFaults); 4] = [
        |n| n.loss = 0.0,
        |n| n.dup = 0.0,
        |n| n.reorder = 0.0,
        |n| n.tail = 0.0,
    ];
    for zero in rates {
        let mut n = net;
        zero(&mut n);
        if n != net {
            out.push(Schedule {
                net: n,
                ..s.clone()
            });
        }
    }
    for i in 0..s.faults.len() {
        if let Fault::Hang { for_us, .. } | Fault::Partition { for_us, .. } = &s.faults[i] {
            if *for_us > 100 {
                let mut c = s.clone();
                if let Fault::Hang { for_us, .. } | Fault::Partition { for_us, .. } =
                    &mut c.faults[i]
                {
                    *for_us /= 2;
                }
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::faults::FaultProtocol;

    #[test]
    fn every_step_is_smaller() {
        let s = super::super::draw(FaultProtocol::Membership, 3, 12);
        let size = |s: &Schedule| {
            let n = &s.net;
            let rates = [n.loss, n.dup, n.reorder, n.tail]
                .iter()
                .filter(|&&r| r > 0.0)
                .count();
            let time: u64 = s
                .faults
                .iter()
                .map(|f| f.over_us() - f.at_us())
                .sum::<u64>();
            (s.faults.len() + rates, time)
        };
        for c in smaller(&s) {
            assert!(size(&c) < size(&s), "{c:?} is not smaller than {s:?}");
        }
    }
}
