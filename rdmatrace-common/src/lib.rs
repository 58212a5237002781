//! The one contract between the kernel programs (`rdmatrace-ebpf`) and user space (`rdmatrace`).
//!
//! Every record that crosses the ring buffer starts with an [`event::EventHeader`] whose first field
//! is the record's [`event::EventKind`]; user space switches on it. Structs are `#[repr(C)]` with
//! explicit padding and compile-time size asserts, so both sides agree byte for byte.
#![no_std]

pub mod config;
pub mod event;
pub mod limits;
pub mod patch;
