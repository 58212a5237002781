//! Where raw events come from: the `EVENTS` ring buffer (polled through tokio) and the `LOST`
//! per-CPU counter of events the kernel could not deliver.

use aya::maps::{MapData, PerCpuArray, RingBuf};
use tokio::io::unix::AsyncFd;

use crate::loader::Tracer;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("the eBPF object has no map `{0}`")]
    MissingMap(&'static str),
    #[error("map `{name}`: {source}")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
    #[error("cannot poll the ring buffer: {0}")]
    Poll(#[source] std::io::Error),
}

pub struct RingSource {
    ring: AsyncFd<RingBuf<MapData>>,
    lost: PerCpuArray<MapData, u64>,
    /// Per CPU, what [`lost_since_last`](Self::lost_since_last) has already handed out.
    lost_reported: Vec<u64>,
}

impl RingSource {
    /// Takes the maps out of the loaded object. Must run inside a tokio runtime.
    pub fn new(tracer: &mut Tracer) -> Result<RingSource, SourceError> {
        let map = tracer
            .ebpf
            .take_map("EVENTS")
            .ok_or(SourceError::MissingMap("EVENTS"))?;
        let ring = RingBuf::try_from(map).map_err(|source| SourceError::Map {
            name: "EVENTS",
            source,
        })?;
        let map = tracer
            .ebpf
            .take_map("LOST")
            .ok_or(SourceError::MissingMap("LOST"))?;
        let lost = PerCpuArray::try_from(map).map_err(|source| SourceError::Map {
            name: "LOST",
            source,
        })?;
        // SAFETY: the ring buffer's fd is owned by the `RingBuf` that the `AsyncFd` takes by
        // value, so it stays open for as long as it is registered.
        let ring =
            unsafe { AsyncFd::register(ring) }.map_err(|e| SourceError::Poll(e.into_parts().1))?;
        Ok(RingSource {
            ring,
            lost,
            lost_reported: Vec::new(),
        })
    }

    /// Waits until the kernel wakes this reader. The programs do so only once an eighth of the
    /// ring is waiting, or for an exec (a wake-up per record is costly), so the caller also
    /// drains on a timer (`limits::DRAIN_MS`). Readiness is cleared before returning, so the
    /// caller must then [`drain_now`](Self::drain_now).
    pub async fn wait_readable(&mut self) -> Result<(), SourceError> {
        let mut guard = self.ring.readable_mut().await.map_err(SourceError::Poll)?;
        guard.clear_ready();
        Ok(())
    }

    /// Hands every record available right now to `f`.
    pub fn drain_now(&mut self, f: &mut impl FnMut(&[u8])) -> usize {
        drain(self.ring.get_mut(), f)
    }

    /// Total events lost so far, summed over CPUs.
    pub fn lost_total(&self) -> u64 {
        self.lost
            .get(&0, 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or_else(|_| self.lost_reported.iter().sum())
    }

    /// Events lost so far on each CPU (index = CPU), as the kernel counted them; empty when the
    /// map cannot be read.
    pub fn lost_per_cpu(&self) -> Vec<u64> {
        self.lost
            .get(&0, 0)
            .map(|per_cpu| per_cpu.iter().copied().collect())
            .unwrap_or_default()
    }

    /// Events lost since the previous call, as (CPU, count) for each CPU that lost some
    /// (empty when none, or when the counters cannot be read this time).
    pub fn lost_since_last(&mut self) -> Vec<(Option<u32>, u64)> {
        let now = self.lost_per_cpu();
        new_losses(&mut self.lost_reported, &now)
    }
}

/// What `now` (per-CPU totals) adds to `reported`, which it then becomes.
fn new_losses(reported: &mut Vec<u64>, now: &[u64]) -> Vec<(Option<u32>, u64)> {
    if reported.len() < now.len() {
        reported.resize(now.len(), 0);
    }
    let mut out = Vec::new();
    for (cpu, (&n, seen)) in now.iter().zip(reported.iter_mut()).enumerate() {
        if n > *seen {
            out.push((u32::try_from(cpu).ok(), n - *seen));
        }
        *seen = n;
    }
    out
}

fn drain(ring: &mut RingBuf<MapData>, f: &mut impl FnMut(&[u8])) -> usize {
    let mut n = 0;
    while let Some(item) = ring.next() {
        f(&item);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    #[test]
    fn new_losses_are_per_cpu_deltas() {
        let mut reported = Vec::new();
        assert_eq!(super::new_losses(&mut reported, &[0, 0]), []);
        assert_eq!(
            super::new_losses(&mut reported, &[3, 0, 5]),
            [(Some(0), 3), (Some(2), 5)]
        );
        assert_eq!(super::new_losses(&mut reported, &[3, 1, 5]), [(Some(1), 1)]);
        assert_eq!(super::new_losses(&mut reported, &[3, 1, 5]), []);
    }
}
