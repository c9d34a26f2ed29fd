//! Slurm's host list syntax (`SLURM_JOB_NODELIST`, `SLURM_STEP_NODELIST`) and its tasks per
//! node (`SLURM_TASKS_PER_NODE`).
//!
//! A host list is a comma-separated list of items; an item is a name with any number of
//! bracket groups, each a comma list of numbers and inclusive ranges, expanded as a cartesian
//! product left to right: `gnode[10,20-22]`, `n[001-012]` (the width of a range's first bound
//! is kept: zero padding), `rack[1-2]-n[1-3]`. Commas inside brackets do not separate items.
//! Expansion is bounded ([`MAX_HOSTS`]) so a hostile value cannot exhaust memory.

use std::fmt::Write;

/// Most hosts a list may expand to: far above any machine's node count.
pub const MAX_HOSTS: usize = 1 << 20;

/// Why a host list or a tasks-per-node value does not parse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{what:?}: {why}")]
pub struct HostlistError {
    /// The value (or the part of it) that is wrong.
    pub what: String,
    /// Why.
    pub why: String,
}

fn err(what: &str, why: impl Into<String>) -> HostlistError {
    HostlistError {
        what: what.into(),
        why: why.into(),
    }
}

/// The top-level items of `s` (commas outside brackets).
fn items(s: &str) -> Result<Vec<&str>, HostlistError> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in s.char_indices() {
        match c {
            '[' if depth > 0 => return Err(err(s, "nested brackets")),
            '[' => depth += 1,
            ']' if depth == 0 => return Err(err(s, "a ']' without its '['")),
            ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(err(s, "a '[' without its ']'"));
    }
    out.push(&s[start..]);
    Ok(out)
}

/// The numbers of one bracket group (`001-003,7`), zero-padded as written.
fn group(g: &str) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for part in g.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(lo) || !digits(hi) {
            return Err(err(part, "expected a number or a range N-M"));
        }
        let (a, b): (u64, u64) = match (lo.parse(), hi.parse()) {
            (Ok(a), Ok(b)) => (a, b),
            _ => return Err(err(part, "number too large")),
        };
        if b < a {
            return Err(err(part, "range ends before it starts"));
        }
        if b - a >= MAX_HOSTS as u64 || out.len() + (b - a) as usize >= MAX_HOSTS {
            return Err(err(part, format!("more than {MAX_HOSTS} hosts")));
        }
        let width = lo.len();
        out.extend((a..=b).map(|n| format!("{n:0width$}")));
    }
    Ok(out)
}

/// Expand one item (`rack[1-2]-n[01-03]`).
fn expand_item(item: &str, hosts: &mut Vec<String>) -> Result<(), HostlistError> {
    if item.is_empty() {
        return Err(err(item, "an empty host name"));
    }
    let mut names = vec![String::new()];
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .ok_or_else(|| err(item, "unclosed '['"))?
            + open;
        let prefix = &rest[..open];
        let numbers = group(&rest[open + 1..close])?;
        if names.len().saturating_mul(numbers.len()) > MAX_HOSTS {
            return Err(err(item, format!("more than {MAX_HOSTS} hosts")));
        }
        names = names
            .iter()
            .flat_map(|n| numbers.iter().map(move |x| format!("{n}{prefix}{x}")))
            .collect();
        rest = &rest[close + 1..];
    }
    if hosts.len() + names.len() > MAX_HOSTS {
        return Err(err(item, format!("more than {MAX_HOSTS} hosts")));
    }
    hosts.extend(names.into_iter().map(|n| n + rest));
    Ok(())
}

/// The hosts a Slurm host list names, in order.
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let list = list.trim();
    if list.is_empty() {
        return Err(err(list, "an empty host list"));
    }
    let mut hosts = Vec::new();
    for item in items(list)? {
        expand_item(item.trim(), &mut hosts)?;
    }
    Ok(hosts)
}

/// A host list naming `hosts` in order: runs of names that differ only in a trailing number of
/// one width are written as ranges (`n[001-003,007]`). [`expand`] gives `hosts` back.
pub fn compress(hosts: &[String]) -> String {
    let split = |h: &str| {
        let digits = h.bytes().rev().take_while(u8::is_ascii_digit).count();
        let (p, d) = h.split_at(h.len() - digits);
        (p.to_string(), d.to_string())
    };
    let mut out = String::new();
    let mut i = 0;
    while i < hosts.len() {
        let (prefix, digits) = split(&hosts[i]);
        // Names with brackets or commas cannot be written as a plain item.
        if digits.is_empty() || prefix.contains(['[', ']', ',']) {
            let _ = write!(out, "{}{}", if out.is_empty() { "" } else { "," }, hosts[i]);
            i += 1;
            continue;
        }
        // The run of names with this prefix and width.
        let mut nums: Vec<(u64, usize)> = Vec::new();
        let mut j = i;
        while j < hosts.len() {
            let (p, d) = split(&hosts[j]);
            if p != prefix || d.len() != digits.len() || d.is_empty() {
                break;
            }
            match d.parse::<u64>() {
                Ok(n) => nums.push((n, d.len())),
                Err(_) => break,
            }
            j += 1;
        }
        if nums.is_empty() {
            let _ = write!(out, "{}{}", if out.is_empty() { "" } else { "," }, hosts[i]);
            i += 1;
            continue;
        }
        let width = digits.len();
        let mut parts = Vec::new();
        let mut k = 0;
        while k < nums.len() {
            let start = nums[k].0;
            let mut end = start;
            while k + 1 < nums.len() && nums[k + 1].0 == end + 1 {
                k += 1;
                end += 1;
            }
            parts.push(if start == end {
                format!("{start:0width$}")
            } else {
                format!("{start:0width$}-{end:0width$}")
            });
            k += 1;
        }
        let _ = write!(
            out,
            "{}{prefix}[{}]",
            if out.is_empty() { "" } else { "," },
            parts.join(",")
        );
        i = j;
    }
    out
}

/// `SLURM_TASKS_PER_NODE` (`2(x3),1`): the tasks on each host, in host order.
pub fn tasks_per_node(value: &str) -> Result<Vec<u32>, HostlistError> {
    let mut out = Vec::new();
    for part in value.trim().split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((c, t)) => {
                let t = t
                    .strip_suffix(')')
                    .ok_or_else(|| err(part, "expected N(xM)"))?;
                (c, t)
            }
            None => (part, "1"),
        };
        let count: u32 = count
            .parse()
            .map_err(|_| err(part, "expected a task count"))?;
        let times: usize = times
            .parse()
            .map_err(|_| err(part, "expected a repeat count"))?;
        if times == 0 || out.len() + times > MAX_HOSTS {
            return Err(err(part, format!("a repeat count of 1 to {MAX_HOSTS}")));
        }
        out.extend(std::iter::repeat_n(count, times));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn the_forms_slurm_writes() {
        assert_eq!(expand("node1").unwrap(), s(&["node1"]));
        assert_eq!(
            expand("gnode[10,20-22]").unwrap(),
            s(&["gnode10", "gnode20", "gnode21", "gnode22"])
        );
        assert_eq!(expand("n[001-003]").unwrap(), s(&["n001", "n002", "n003"]));
        assert_eq!(expand("n[8-11]").unwrap(), s(&["n8", "n9", "n10", "n11"]));
        assert_eq!(
            expand("a[1-2],b,c[07,9]").unwrap(),
            s(&["a1", "a2", "b", "c07", "c9"])
        );
        assert_eq!(
            expand("rack[1-2]-n[1-2]").unwrap(),
            s(&["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"])
        );
        assert_eq!(expand(" x[0-1] ").unwrap(), s(&["x0", "x1"]));
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in [
            "",
            "n[1-",
            "n1]",
            "n[[1]]",
            "n[3-1]",
            "n[a-b]",
            "n[]",
            "n[1-2],",
            ",n1",
            "n[-3]",
            "n[1-99999999999]",
            "n[0-1048576]",
        ] {
            assert!(expand(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn tasks_per_node_as_slurm_writes_it() {
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), vec![2, 2, 2, 1]);
        assert_eq!(tasks_per_node("4").unwrap(), vec![4]);
        for bad in ["", "2(x", "2(x0)", "x", "2(x3", "-1", "2(x99999999)"] {
            assert!(tasks_per_node(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Any list of names made of a prefix and numbers of a width comes back through
        /// `compress` and `expand` unchanged, in order.
        #[test]
        fn compress_then_expand_gives_the_hosts_back(
            names in proptest::collection::vec(
                (prop::sample::select(vec!["n", "gnode", "rack1-n", "x"]), 0u64..40, 1usize..4),
                1..40,
            )
        ) {
            let hosts: Vec<String> =
                names.iter().map(|(p, n, w)| format!("{p}{n:0w$}")).collect();
            let list = compress(&hosts);
            prop_assert_eq!(expand(&list).unwrap(), hosts, "{}", list);
        }

        /// Whatever the bytes, expansion ends with hosts or an error, never a panic.
        #[test]
        fn any_input_is_hosts_or_an_error(s in "[a-z0-9\\[\\],\\- ]{0,40}") {
            if let Ok(hosts) = expand(&s) {
                prop_assert!(!hosts.is_empty() && hosts.len() <= MAX_HOSTS);
            }
            let _ = tasks_per_node(&s);
        }
    }
}
