//! Stacks: verbs calls with the user stack that made them, on-CPU samples, and their frames
//! (named at record time, see `symbolize`).

/// One stack frame: an address and, once symbolized, what it is (a function name, `[module]`
/// when the module has no symbol there, or `[unknown]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub addr: u64,
    /// Shared with the symbol table (a million samples name the same few thousand frames).
    pub name: Option<std::sync::Arc<str>>,
}

impl Frame {
    pub fn new(addr: u64) -> Frame {
        Frame { addr, name: None }
    }

    /// The name, or `[unknown]` when the address could not be symbolized.
    pub fn label(&self) -> &str {
        self.name.as_deref().unwrap_or(UNKNOWN_FRAME)
    }
}

/// What an address that could not be symbolized reads as.
pub const UNKNOWN_FRAME: &str = "[unknown]";

/// A control-path verbs call and the user stack that made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsCall {
    /// `ibv_create_qp`, `rdma_connect`, ...
    pub func: String,
    /// Callers, innermost first (the probed function's own entry is not included).
    pub stack: Vec<Frame>,
}

/// An on-CPU sample: user and kernel stacks, innermost first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuSample {
    pub user: Vec<Frame>,
    pub kernel: Vec<Frame>,
}
