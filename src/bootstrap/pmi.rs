//! A PMI-1 client, written in weft (no C library): what MPICH's Hydra (`mpiexec.hydra`) and
//! other PMI-1 process managers offer a process on the socket named by `PMI_FD`.
//!
//! The wire protocol is text, one command per line, `key=value` words separated by spaces:
//!
//! ```text
//! cmd=init pmi_version=1 pmi_subversion=1   ->  cmd=response_to_init pmi_version=1 ... rc=0
//! cmd=get_maxes                             ->  cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024
//! cmd=get_my_kvsname                        ->  cmd=my_kvsname kvsname=NAME
//! cmd=put kvsname=NAME key=K value=V        ->  cmd=put_result rc=0 msg=success
//! cmd=barrier_in                            ->  cmd=barrier_out
//! cmd=get kvsname=NAME key=K                ->  cmd=get_result rc=0 msg=success value=V
//! cmd=finalize                              ->  cmd=finalize_ack
//! ```
//!
//! A reply that is not the one expected, or carries `rc` other than 0, is an error naming the
//! command and the reply; a closed socket is an error, never a hang (the caller sets a read
//! timeout). Keys and values may not hold spaces, `=` (keys) or newlines: they are refused
//! before they are sent.

use super::BootstrapError;
use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};

/// One reply: its words as `key → value`.
pub type Reply = HashMap<String, String>;

/// Parse one reply line into its `key=value` words. Words without `=` are refused.
pub fn parse_reply(line: &str) -> Result<Reply, BootstrapError> {
    let mut out = Reply::new();
    for word in line.split_whitespace() {
        let (k, v) = word
            .split_once('=')
            .ok_or_else(|| pmi_err(format!("reply word {word:?} is not key=value in {line:?}")))?;
        out.insert(k.to_string(), v.to_string());
    }
    if !out.contains_key("cmd") {
        return Err(pmi_err(format!("reply {line:?} has no cmd")));
    }
    Ok(out)
}

fn pmi_err(why: String) -> BootstrapError {
    BootstrapError::Launcher {
        variable: "PMI_FD".into(),
        why,
    }
}

/// A word the protocol can carry: no whitespace, no `=` in keys, not empty.
fn check_word(what: &str, w: &str, key: bool) -> Result<(), BootstrapError> {
    if w.is_empty() || w.chars().any(char::is_whitespace) || (key && w.contains('=')) {
        return Err(pmi_err(format!("{what} {w:?} cannot be sent over PMI-1")));
    }
    Ok(())
}

/// A PMI-1 session over a connected stream (the `PMI_FD` socket).
pub struct Pmi<S: std::io::Read + Write> {
    reader: BufReader<S>,
    kvsname: String,
    /// Longest value the process manager takes.
    pub vallen_max: usize,
    /// The read timeout the caller set on the stream, for the error when it runs out.
    within: std::time::Duration,
}

impl<S: std::io::Read + Write> Pmi<S> {
    /// `init`, `get_maxes` and `get_my_kvsname` over `stream`, whose reads time out after
    /// `within` (a silent process manager is then named as such).
    pub fn init(stream: S, within: std::time::Duration) -> Result<Self, BootstrapError> {
        let mut p = Self {
            reader: BufReader::new(stream),
            kvsname: String::new(),
            vallen_max: 1024,
            within,
        };
        p.call(
            "cmd=init pmi_version=1 pmi_subversion=1",
            "response_to_init",
        )?;
        let maxes = p.call("cmd=get_maxes", "maxes")?;
        if let Some(v) = maxes.get("vallen_max").and_then(|v| v.parse().ok()) {
            p.vallen_max = v;
        }
        let name = p.call("cmd=get_my_kvsname", "my_kvsname")?;
        p.kvsname = name
            .get("kvsname")
            .cloned()
            .ok_or_else(|| pmi_err("my_kvsname without a kvsname".into()))?;
        check_word("kvsname", &p.kvsname, false)?;
        Ok(p)
    }

    /// The job's key-value space name (unique to the job: weft derives its job id from it).
    pub fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// Send one command and read the reply, which must be `cmd=want` with `rc` 0 (or none).
    fn call(&mut self, command: &str, want: &str) -> Result<Reply, BootstrapError> {
        let s = self.reader.get_mut();
        s.write_all(command.as_bytes())
            .and_then(|()| s.write_all(b"\n"))
            .and_then(|()| s.flush())
            .map_err(|e| pmi_err(format!("{command:?}: {e}")))?;
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => return Err(pmi_err(format!("{command:?}: the process manager hung up"))),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(pmi_err(format!(
                    "{command:?}: the process manager did not answer within {} ms",
                    self.within.as_millis()
                )))
            }
            Err(e) => return Err(pmi_err(format!("{command:?}: {e}"))),
        }
        let reply = parse_reply(line.trim_end())?;
        if reply.get("cmd").map(String::as_str) != Some(want) {
            return Err(pmi_err(format!(
                "{command:?}: expected cmd={want}, got {:?}",
                line.trim_end()
            )));
        }
        if let Some(rc) = reply.get("rc").filter(|rc| rc.as_str() != "0") {
            let msg = reply.get("msg").map_or("", String::as_str);
            return Err(pmi_err(format!("{command:?}: rc={rc} {msg}")));
        }
        Ok(reply)
    }

    /// Put `key = value` into the job's space.
    pub fn put(&mut self, key: &str, value: &str) -> Result<(), BootstrapError> {
        check_word("key", key, true)?;
        check_word("value", value, false)?;
        if value.len() > self.vallen_max {
            return Err(pmi_err(format!(
                "value of {} bytes for {key:?}: the process manager takes {}",
                value.len(),
                self.vallen_max
            )));
        }
        let cmd = format!("cmd=put kvsname={} key={key} value={value}", self.kvsname);
        self.call(&cmd, "put_result").map(drop)
    }

    /// Wait until every process of the job has entered the barrier.
    pub fn barrier(&mut self) -> Result<(), BootstrapError> {
        self.call("cmd=barrier_in", "barrier_out").map(drop)
    }

    /// The value of `key` in the job's space.
    pub fn get(&mut self, key: &str) -> Result<String, BootstrapError> {
        check_word("key", key, true)?;
        let cmd = format!("cmd=get kvsname={} key={key}", self.kvsname);
        let reply = self.call(&cmd, "get_result")?;
        reply
            .get("value")
            .cloned()
            .ok_or_else(|| pmi_err(format!("{cmd:?}: get_result without a value")))
    }

    /// End the session.
    pub fn finalize(mut self) -> Result<(), BootstrapError> {
        self.call("cmd=finalize", "finalize_ack").map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn replies_parse_into_their_words() {
        let r = parse_reply("cmd=get_result rc=0 msg=success value=127.0.0.1:7").unwrap();
        assert_eq!(r["cmd"], "get_result");
        assert_eq!(r["value"], "127.0.0.1:7");
        assert!(parse_reply("cmd=x word").is_err(), "a word without =");
        assert!(parse_reply("rc=0").is_err(), "no cmd");
        assert!(parse_reply("").is_err());
    }

    #[test]
    fn words_the_protocol_cannot_carry_are_refused_before_sending() {
        assert!(check_word("key", "a b", true).is_err());
        assert!(check_word("key", "a=b", true).is_err());
        assert!(check_word("value", "a=b", false).is_ok());
        assert!(check_word("value", "", false).is_err());
        assert!(check_word("value", "x\ny", false).is_err());
    }

    /// A process manager that takes the command and never answers: the read timeout is named
    /// as its silence, with its length, not as "Resource temporarily unavailable".
    #[test]
    fn a_silent_process_manager_is_named_with_the_wait() {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let within = std::time::Duration::from_millis(50);
        ours.set_read_timeout(Some(within)).unwrap();
        let err = Pmi::init(ours, within).err().unwrap().to_string();
        assert!(
            err.contains("did not answer within 50 ms") && err.contains("PMI_FD"),
            "{err}"
        );
    }

    proptest! {
        /// Whatever a process manager sends back, a reply parses or is an error.
        #[test]
        fn any_reply_line_parses_or_is_an_error(line in "[ -~]{0,80}") {
            if let Ok(r) = parse_reply(&line) {
                prop_assert!(r.contains_key("cmd"));
            }
        }

        /// key=value words come back as they were written.
        #[test]
        fn words_round_trip(pairs in proptest::collection::hash_map(
            "[a-z_]{1,8}", "[!-~]{1,12}", 1..6)) {
            let mut line = String::from("cmd=t");
            for (k, v) in &pairs {
                if k != "cmd" {
                    line.push_str(&format!(" {k}={v}"));
                }
            }
            let r = parse_reply(&line).unwrap();
            for (k, v) in pairs.iter().filter(|(k, _)| k.as_str() != "cmd") {
                prop_assert_eq!(&r[k], v);
            }
        }
    }
}
