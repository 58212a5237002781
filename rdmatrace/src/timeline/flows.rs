//! Flow arrows between tracks of several hosts: each paired connection's handshake, from the
//! end that reached RTR first to the other, on the common clock.

use super::{Event, Timeline, TrackKind, What};
use crate::event::QpKey;

/// One end of an arrow: host index, owner pid, QP, and when (wall ns, common clock).
pub type FlowEnd = (usize, u32, QpKey, u64);

impl Timeline {
    /// The track of QP `key` of process `pid` on host `host`.
    pub fn qp_track(&self, host: usize, pid: u32, key: &QpKey) -> Option<u64> {
        self.tracks
            .iter()
            .find(|t| {
                t.host == host
                    && t.pid == pid
                    && matches!(&t.kind, TrackKind::Qp { key: k, .. } if k == key)
            })
            .map(|t| t.uuid)
    }

    /// Adds an arrow `name` from `from` to `to` (both ends' tracks must exist); returns whether
    /// it was added.
    pub fn flow(&mut self, name: &str, from: &FlowEnd, to: &FlowEnd) -> bool {
        let (Some(a), Some(b)) = (
            self.qp_track(from.0, from.1, &from.2),
            self.qp_track(to.0, to.1, &to.2),
        ) else {
            return false;
        };
        let id = self
            .events
            .iter()
            .filter_map(|e| match e.what {
                What::Flow { id, .. } => Some(id),
                _ => None,
            })
            .max()
            .unwrap_or(0)
            + 1;
        for (track, wall_ns, terminating) in [(a, from.3, false), (b, to.3, true)] {
            self.events.push(Event {
                wall_ns,
                track,
                what: What::Flow {
                    name: name.to_string(),
                    id,
                    terminating,
                },
            });
        }
        true
    }
}
