//! User-side event filter (`--pid`, `--comm`, `--dev`, `--qpn`). The pid filter also runs in the
//! kernel; it is repeated here so a replayed recording filters the same way.

use crate::event::{Body, Record};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub dev: Option<String>,
    pub qpn: Option<u32>,
}

impl Filter {
    pub fn matches(&self, rec: &Record) -> bool {
        // Loss is never filtered away.
        if matches!(rec.body, Body::Lost { .. }) {
            return true;
        }
        if self.pid.is_some_and(|p| p != rec.subject_pid()) {
            return false;
        }
        if self
            .comm
            .as_deref()
            .is_some_and(|c| c != rec.subject_comm())
        {
            return false;
        }
        if self.dev.is_none() && self.qpn.is_none() {
            return true;
        }
        // A device or QPN filter keeps only events about that device / QPN.
        self.dev.as_deref().is_none_or(|d| rec.dev() == Some(d))
            && self.qpn.is_none_or(|q| rec.qpn() == Some(q))
    }
}
