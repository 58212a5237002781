//! The one stage: raw records (ring buffer or recording) -> decode -> stack names ->
//! correlate -> filter -> a [`Sink`]. Live tracing and every command that reads a recording go
//! through it, so they all see the same records the same way; [`crate::replay`] feeds it a
//! file.

use std::io;

use rustc_hash::FxHashSet;

use crate::{
    clock::ClockAnchor,
    container::CgroupPaths,
    correlate::{filter::Filter, Correlator},
    decode::{decode_into, DecodeError},
    environ::EnvReader,
    event::Record,
    recording::Entry,
    sinks::Sink,
    symbolize::{resolver::Resolver, Symbols},
};

/// Cgroup ids not found that are remembered (then forgotten all at once and tried again).
const MAX_CGROUPS_NOT_FOUND: usize = 10_000;

pub struct Stage<S: Sink> {
    anchor: ClockAnchor,
    state: Correlator,
    filter: Filter,
    /// Names of stack addresses: from the recording on replay, from [`Self::resolver`] live.
    symbols: Symbols,
    /// Live only: names stack addresses while the processes live.
    resolver: Option<Resolver>,
    /// Live only: cgroup ids to paths while the cgroups exist.
    cgroup_paths: Option<CgroupPaths>,
    /// Cgroup ids looked up and not found: each is walked for once (up to
    /// [`MAX_CGROUPS_NOT_FOUND`]).
    cgroups_tried: FxHashSet<u64>,
    /// Live only: reads each process's transport variables once.
    env: Option<EnvReader>,
    sink: S,
    /// Records seen (before filtering).
    pub events: u64,
    pub decode_errors: u64,
    pub first_decode_error: Option<DecodeError>,
    /// The record `raw` decodes into, kept between calls.
    scratch: Option<Box<Record>>,
    /// First write error of the sink: it ends a live trace.
    write_error: Option<io::Error>,
}

impl<S: Sink> Stage<S> {
    /// A stage whose records are stamped with wall time through `anchor`.
    pub fn new(anchor: ClockAnchor, filter: Filter, sink: S) -> Stage<S> {
        Stage {
            anchor,
            state: Correlator::new(),
            filter,
            symbols: Symbols::default(),
            resolver: None,
            cgroup_paths: None,
            cgroups_tried: FxHashSet::default(),
            env: None,
            sink,
            events: 0,
            decode_errors: 0,
            first_decode_error: None,
            scratch: None,
            write_error: None,
        }
    }

    /// Live: names stack addresses with `resolver` while the processes live, and hands the
    /// names to the sink before the records that need them.
    pub fn with_resolver(mut self, resolver: Resolver) -> Stage<S> {
        self.resolver = Some(resolver);
        self
    }

    /// Live: resolves cgroup ids to paths below `paths`' root (the cgroup2 mount) and hands
    /// them to the sink before the first record that names them.
    pub fn with_cgroup_paths(mut self, paths: CgroupPaths) -> Stage<S> {
        self.cgroup_paths = Some(paths);
        self
    }

    /// Live: reads the transport variables (an allowlist, `crate::environ`) of each process
    /// when first seen, and hands them to the correlator and the sink after that record.
    pub fn with_environ(mut self) -> Stage<S> {
        self.env = Some(EnvReader::default());
        self
    }

    pub fn sink_mut(&mut self) -> &mut S {
        &mut self.sink
    }

    fn check(&mut self, r: io::Result<()>) {
        if let Err(e) = r {
            self.write_error.get_or_insert(e);
        }
    }

    pub fn start(&mut self) -> io::Result<()> {
        self.sink.start()
    }

    /// One raw ring-buffer record (live, or an event entry of a recording). The sink gets the
    /// names its stack needs first, then the raw bytes, then the correlated record.
    pub fn raw(&mut self, bytes: &[u8]) {
        if !self.sink.accepts(bytes) {
            return;
        }
        // The record is decoded into a boxed one kept between calls (no copy of it per event).
        let mut rec = self
            .scratch
            .take()
            .unwrap_or_else(|| Box::new(Record::lost(0, None, 0, &self.anchor)));
        let decoded = decode_into(bytes, &self.anchor, &mut rec);
        if let (Some(resolver), Ok(())) = (self.resolver.as_mut(), decoded.as_ref()) {
            for s in resolver.names_for(&rec) {
                self.symbols.insert(s.pid, s.addr, &s.name);
                let r = self.sink.symbol(s.pid, s.addr, &s.name);
                self.check(r);
            }
        }
        if let (Some(paths), Ok(())) = (self.cgroup_paths.as_mut(), decoded.as_ref()) {
            if let crate::event::Body::ProcessCgroup { id } = rec.body {
                // A place forgotten (no process left in it) is looked up again when a process
                // shows up there; an id not found is not walked for again (up to a bound).
                if !self.state.cgroups().knows(id) && !self.cgroups_tried.contains(&id) {
                    if let Some(path) = paths.path_of(id).map(str::to_string) {
                        self.state.cgroup_named(id, &path);
                        let r = self.sink.cgroup(id, &path);
                        self.check(r);
                    } else {
                        if self.cgroups_tried.len() >= MAX_CGROUPS_NOT_FOUND {
                            self.cgroups_tried.clear();
                        }
                        self.cgroups_tried.insert(id);
                    }
                }
            }
        }
        let r = self.sink.raw(bytes);
        self.check(r);
        match decoded {
            Ok(()) => {
                self.symbols.annotate(&mut rec);
                let vars = self.env.as_mut().and_then(|e| e.for_record(&rec));
                self.push_in_place(&mut rec);
                if let Some((pid, vars)) = vars {
                    for (name, value) in &vars {
                        self.env(pid, name, value);
                    }
                }
            }
            Err(e) => {
                self.decode_errors += 1;
                self.first_decode_error.get_or_insert(e);
            }
        }
        self.scratch = Some(rec);
    }

    /// One decoded record.
    pub fn push(&mut self, mut rec: Record) {
        self.push_in_place(&mut rec);
    }

    /// [`Stage::push`] of a record the caller keeps (records are large: this spares a copy).
    fn push_in_place(&mut self, rec: &mut Record) {
        self.events += 1;
        self.state.observe(rec);
        if self.write_error.is_some() || !self.filter.matches(rec, self.state.place(rec)) {
            return;
        }
        let r = self.sink.record(rec, &self.state);
        self.check(r);
    }

    /// `count` events lost (on `cpu` when known) at monotonic time `ts_ns`.
    pub fn lost(&mut self, count: u64, cpu: Option<u32>, ts_ns: u64) {
        if count == 0 {
            return;
        }
        self.push(Record::lost(count, cpu, ts_ns, &self.anchor));
    }

    /// A recorded name of a stack address.
    pub fn symbol(&mut self, pid: u32, addr: u64, name: &str) {
        self.symbols.insert(pid, addr, name);
        let r = self.sink.symbol(pid, addr, name);
        self.check(r);
    }

    /// A recorded cgroup path.
    pub fn cgroup(&mut self, id: u64, path: &str) {
        self.state.cgroup_named(id, path);
        let r = self.sink.cgroup(id, path);
        self.check(r);
    }

    /// Transport variable `name` of process `pid` is `value`.
    pub fn env(&mut self, pid: u32, name: &str, value: &str) {
        self.state.env_seen(pid, name, value);
        let r = self.sink.env(pid, name, value);
        self.check(r);
    }

    /// One entry of a recording.
    pub fn entry(&mut self, entry: Entry<'_>) {
        match entry {
            Entry::Event(bytes) => self.raw(bytes),
            Entry::Lost { ts_ns, count, cpu } => self.lost(count, cpu, ts_ns),
            Entry::Symbol { pid, addr, name } => self.symbol(pid, addr, name),
            Entry::Cgroup { id, path } => self.cgroup(id, path),
            Entry::Env { pid, name, value } => self.env(pid, name, value),
        }
    }

    /// Live: once a second.
    pub fn tick(&mut self) {
        // Destroyed QPs are remembered 10 minutes for late samples, then forgotten.
        self.state.forget_ended(600_000_000_000);
        let r = self.sink.tick(&self.state);
        self.check(r);
    }

    /// Whether the stage cannot go on: its output failed, or the sink wants no more.
    pub fn broken(&self) -> bool {
        self.write_error.is_some() || self.sink.done()
    }

    /// Finishes the sink and returns it. The first output error of the run is the error (a
    /// closed pipe included: the caller decides whether that is normal).
    pub fn finish(mut self) -> io::Result<S> {
        let finished = self.sink.finish(&self.state);
        if let Some(e) = self.write_error.take() {
            return Err(e);
        }
        finished?;
        Ok(self.sink)
    }

    /// Says on stderr how many records could not be decoded, if any.
    pub fn warn_undecodable(&self, what: &str) {
        if let Some(e) = &self.first_decode_error {
            eprintln!(
                "rdmatrace: {what}{} records could not be decoded (first: {e})",
                self.decode_errors
            );
        }
    }
}
