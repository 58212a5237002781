//! Empty library target: lets `rdmatrace` name this crate as a build-dependency (so cargo rebuilds
//! the user binary when the kernel programs change) without compiling them for the host.
#![no_std]
