//! One file per probe area; user space attaches them from `rdmatrace/src/collect/<area>.rs`.
pub mod async_event;
pub mod cm;
pub mod cq;
pub mod mlx5;
pub mod profile;
pub mod qp;
pub mod queues;
pub mod res;
pub mod rxe;
pub mod rxe_fentry;
pub mod sched;
pub mod tcp;
pub mod tcp_typed;
pub mod umem;
pub mod verbs;
