//! QP accounting: each QP life's owner, states and time in each, peer, traffic, retransmits and
//! errors. Lives are numbered by the correlator, which alone follows QP state; this book
//! only keeps the accounts, indexed by life.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::{
    correlate::Correlator,
    event::{CompactString, QpKey, QpState, Record},
};

/// A QP left in INIT or RTR longer than this is reported as stuck.
pub const STUCK_NS: u64 = 5_000_000_000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpLife {
    pub key: QpKey,
    pub owner_pid: u32,
    pub owner_comm: CompactString,
    pub qp_type: u32,
    pub created_ns: u64,
    pub destroyed_ns: Option<u64>,
    pub state: Option<QpState>,
    pub state_since_ns: u64,
    /// ns spent in each state (closed intervals only, plus the open one at finish).
    pub time_in: BTreeMap<&'static str, u64>,
    pub peer_qpn: Option<u32>,
    pub peer_gid: Option<[u8; 16]>,
    /// The source GID index of its address vector (last modify that set one).
    pub sgid_index: Option<u32>,
    /// The GID at `sgid_index` in its device's GID table (filled at the end of the analysis,
    /// when the table was sampled): this end's address, as its peer knows it.
    pub local_gid: Option<[u8; 16]>,
    /// When it first entered RTR, RTS and ERR (monotonic ns): a connection's handshake, for
    /// pairing both ends across hosts and aligning their clocks.
    pub rtr_ns: Option<u64>,
    pub rts_ns: Option<u64>,
    pub err_ns: Option<u64>,
    pub tx_bytes: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub rx_packets: u64,
    pub retransmits: u64,
    /// Of `retransmits`, those of the RNR NAK timer (the receiver was not ready: not loss).
    pub rnr_retransmits: u64,
    /// Error completions (first status kept in the anomalies).
    pub wc_errors: u64,
    pub failed_modifies: u64,
}

impl QpLife {
    /// A QP first seen in `rec`, owned by its process, in `state`, with nothing counted yet.
    fn new(key: &QpKey, rec: &Record, qp_type: u32, state: Option<QpState>) -> QpLife {
        QpLife {
            key: key.clone(),
            owner_pid: rec.pid,
            owner_comm: rec.comm.clone(),
            qp_type,
            created_ns: rec.ts_ns,
            destroyed_ns: None,
            state,
            state_since_ns: rec.ts_ns,
            time_in: BTreeMap::new(),
            peer_qpn: None,
            peer_gid: None,
            sgid_index: None,
            local_gid: None,
            rtr_ns: None,
            rts_ns: None,
            err_ns: None,
            tx_bytes: 0,
            tx_packets: 0,
            rx_bytes: 0,
            rx_packets: 0,
            retransmits: 0,
            rnr_retransmits: 0,
            wc_errors: 0,
            failed_modifies: 0,
        }
    }

    /// Enters `new` at `ts`, closing the time spent in the state it leaves.
    pub(super) fn enter(&mut self, new: QpState, ts: u64) {
        self.close_interval(ts);
        let first = match new {
            QpState::Rtr => &mut self.rtr_ns,
            QpState::Rts => &mut self.rts_ns,
            QpState::Err => &mut self.err_ns,
            _ => &mut None,
        };
        first.get_or_insert(ts);
        self.state = Some(new);
        self.state_since_ns = ts;
    }

    /// Adds the time since the last change to the current state's total; returns it.
    fn close_interval(&mut self, ts: u64) -> u64 {
        let open = ts.saturating_sub(self.state_since_ns);
        if let Some(s) = self.state {
            *self.time_in.entry(s.name()).or_default() += open;
        }
        open
    }

    /// The life ends at `ts`; returns how long it sat in its last state.
    pub(super) fn end(&mut self, ts: u64) -> u64 {
        let open = self.close_interval(ts);
        self.destroyed_ns = Some(ts);
        self.state_since_ns = ts;
        open
    }

    /// Whether the QP is connected (an RDMA endpoint: RTR is enough for a passive side).
    pub fn connected(state: Option<QpState>) -> bool {
        matches!(state, Some(QpState::Rtr | QpState::Rts | QpState::Sqd))
    }
}

/// The accounts of every QP life that has an owning process, in order of appearance.
#[derive(Clone, Default)]
pub(super) struct QpBook {
    pub qps: Vec<QpLife>,
    /// Correlator life -> index in `qps` (lives owned by the kernel have no account).
    by_life: FxHashMap<usize, usize>,
}

impl QpBook {
    /// Opens the account of `life`, first seen in `rec`.
    pub fn open(
        &mut self,
        life: usize,
        key: &QpKey,
        rec: &Record,
        qp_type: u32,
        state: Option<QpState>,
    ) -> &mut QpLife {
        self.by_life.insert(life, self.qps.len());
        self.qps.push(QpLife::new(key, rec, qp_type, state));
        let last = self.qps.len() - 1;
        &mut self.qps[last]
    }

    pub fn life_mut(&mut self, life: usize) -> Option<&mut QpLife> {
        let i = *self.by_life.get(&life)?;
        self.qps.get_mut(i)
    }

    /// The account of the live QP with this key.
    pub fn live_mut(&mut self, key: &QpKey, state: &Correlator) -> Option<&mut QpLife> {
        self.life_mut(state.qp(key)?.life)
    }

    /// The account of the live QP with this key, else of the last one that had it.
    pub fn latest_mut(&mut self, key: &QpKey, state: &Correlator) -> Option<&mut QpLife> {
        self.life_mut(state.life(key)?)
    }

    /// Forgets the accounts of QPs destroyed before `before_ns`.
    pub fn forget_destroyed(&mut self, before_ns: u64) {
        if !self
            .qps
            .iter()
            .any(|q| q.destroyed_ns.is_some_and(|d| d < before_ns))
        {
            return;
        }
        let mut index = vec![usize::MAX; self.qps.len()];
        let mut kept = Vec::with_capacity(self.qps.len());
        for (i, q) in std::mem::take(&mut self.qps).into_iter().enumerate() {
            if q.destroyed_ns.is_none_or(|d| d >= before_ns) {
                index[i] = kept.len();
                kept.push(q);
            }
        }
        self.qps = kept;
        self.by_life.retain(|_, i| {
            *i = index[*i];
            *i != usize::MAX
        });
    }

    /// Closes the open intervals at `end`; returns the QPs still in INIT or RTR longer than
    /// [`STUCK_NS`], with how long.
    pub fn close_all(&mut self, end: u64) -> Vec<(usize, QpState, u64)> {
        let mut stuck = Vec::new();
        for (i, q) in self
            .qps
            .iter_mut()
            .enumerate()
            .filter(|(_, q)| q.destroyed_ns.is_none())
        {
            if let Some(s) = q.state {
                let open = end.saturating_sub(q.state_since_ns);
                *q.time_in.entry(s.name()).or_default() += open;
                if matches!(s, QpState::Init | QpState::Rtr) && open > STUCK_NS {
                    stuck.push((i, s, open));
                }
            }
        }
        stuck
    }
}
