use super::{maps, resolver::Resolver, *};
use crate::event::{CpuSample, VerbsCall};

const MAPS: &str = "\
55d0c0000000-55d0c0010000 r--p 00000000 08:01 123 /usr/bin/rt-mover
55d0c0010000-55d0c0080000 r-xp 00010000 08:01 123 /usr/bin/rt-mover
7f0000000000-7f0000020000 r-xp 00007000 08:01 456 /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0
7f0000100000-7f0000101000 r-xp 00000000 00:00 0 [vdso]
7f0000200000-7f0000201000 rw-p 00000000 00:00 0 [heap]
7f0000300000-7f0000301000 r-xp 00000000 08:01 789 /tmp/with space (deleted)
garbage line
";

#[test]
fn maps_keep_executable_mappings_with_offsets() {
    let m = maps::parse(MAPS);
    let paths: Vec<String> = m.iter().map(|m| m.path.display().to_string()).collect();
    assert_eq!(
        paths,
        [
            "/usr/bin/rt-mover",
            "/usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.56.0",
            "[vdso]",
            "/tmp/with space",
        ]
    );
    let verbs = &m[1];
    assert!(verbs.contains(0x7f0000001000) && !verbs.contains(0x7f0000020000));
    assert_eq!(verbs.file_offset(0x7f0000001000), 0x8000);
    assert_eq!(verbs.module_label(), "[libibverbs.so.1.14.56.0]");
    assert_eq!(m[2].module_label(), "[vdso]");
    assert!(!m[2].is_file());
}

fn verbs_record(pid: u32, addrs: &[u64]) -> Record {
    Record {
        ts_ns: 1,
        wall_ns: 1,
        cpu: 0,
        pid,
        tid: pid,
        comm: "x".into(),
        body: Body::VerbsCall(VerbsCall {
            func: "ibv_create_qp".into(),
            stack: addrs.iter().map(|a| Frame::new(*a)).collect(),
        }),
    }
}

#[test]
fn table_names_user_frames_per_process_and_kernel_frames_once() {
    let mut t = Symbols::default();
    t.insert(7, 0x10, "main");
    t.insert(8, 0x10, "other_main");
    t.insert(KERNEL_PID, 0xffff, "do_syscall_64");
    let mut rec = verbs_record(7, &[0x10, 0x20]);
    t.annotate(&mut rec);
    let Body::VerbsCall(v) = &rec.body else {
        panic!("verbs call expected")
    };
    assert_eq!(v.stack[0].label(), "main");
    assert_eq!(v.stack[1].label(), "[unknown]");
    let mut sample = Record {
        body: Body::CpuSample(CpuSample {
            user: vec![Frame::new(0x10)],
            kernel: vec![Frame::new(0xffff)],
        }),
        ..verbs_record(8, &[])
    };
    t.annotate(&mut sample);
    let Body::CpuSample(c) = &sample.body else {
        panic!("sample expected")
    };
    assert_eq!(c.user[0].label(), "other_main");
    assert_eq!(c.kernel[0].label(), "do_syscall_64");
    // A later name for the same address replaces the earlier one (exec).
    t.insert(7, 0x10, "new_main");
    assert_eq!(t.get(7, 0x10), Some("new_main"));
}

/// A function of this test binary, to be found by address.
#[inline(never)]
#[no_mangle]
pub extern "C" fn rdmatrace_symbolize_probe_target() -> u64 {
    std::hint::black_box(42)
}

#[test]
fn resolver_names_this_process_and_says_unknown_for_the_rest() {
    use rdmatrace_common::event::{EventKind, VerbsCallEvent, STACK_DEPTH};
    let pid = std::process::id();
    let here = rdmatrace_symbolize_probe_target as *const () as u64;
    // SAFETY: all-zero is a valid value of this integer-only struct.
    let mut ev: VerbsCallEvent = unsafe { std::mem::zeroed() };
    ev.header.kind = EventKind::VerbsCall as u32;
    ev.header.pid = pid;
    ev.func = rdmatrace_common::event::verbs_func::IBV_CREATE_QP;
    ev.ips[0] = 0x1234; // the probed function's entry: not part of the stack
    ev.ips[1] = here + 1;
    ev.ips[2] = 8; // mapped nowhere
    ev.frames = 3;
    const { assert!(STACK_DEPTH >= 3) };
    // SAFETY: a plain integer struct viewed as its bytes.
    let bytes = unsafe {
        std::slice::from_raw_parts(
            (&ev as *const VerbsCallEvent).cast::<u8>(),
            std::mem::size_of::<VerbsCallEvent>(),
        )
    };
    let rec = crate::decode::decode(bytes, &crate::clock::ClockAnchor::fixed(0)).expect("decodes");
    let mut r = Resolver::new();
    let names = r.names_for(&rec);
    let by_addr = |a: u64| names.iter().find(|n| n.addr == a).map(|n| n.name.as_str());
    assert_eq!(by_addr(here + 1), Some("rdmatrace_symbolize_probe_target"));
    assert_eq!(by_addr(8), Some("[unknown]"));
    assert_eq!(by_addr(0x1234), None);
    assert!(names.iter().all(|n| n.pid == pid));
    // Named once: the same stack again needs nothing new.
    assert!(r.names_for(&rec).is_empty());
}

#[test]
fn one_text_is_stored_once_for_every_address_it_names() {
    let mut t = Symbols::default();
    t.insert(7, 0x10, "ibv_post_send");
    t.insert(8, 0x20, "ibv_post_send");
    let name = |t: &Symbols, pid, addr| {
        let mut rec = verbs_record(pid, &[addr]);
        t.annotate(&mut rec);
        match rec.body {
            Body::VerbsCall(mut v) => v.stack.remove(0).name,
            _ => None,
        }
    };
    let (a, b) = (name(&t, 7, 0x10), name(&t, 8, 0x20));
    assert!(matches!((&a, &b), (Some(a), Some(b)) if std::sync::Arc::ptr_eq(a, b)));
    assert_eq!(t.get(8, 0x20), Some("ibv_post_send"));
}
