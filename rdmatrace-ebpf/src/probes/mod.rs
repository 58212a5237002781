//! One file per probe area; user space attaches them from `rdmatrace/src/collect/<area>.rs`.
pub mod qp;
pub mod rxe;
pub mod sched;
pub mod tcp;
