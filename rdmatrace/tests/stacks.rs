//! Host tier, stacks: `record` on this host's kernel (uprobes and perf events work here even
//! without an RDMA stack) of a child that is this test binary itself, running a named function:
//! a verbs call made through the installed libibverbs, and a CPU-bound loop. The folded
//! flamegraphs must name those functions. Recording needs root: these tests are ignored by
//! `cargo test` and run by `cargo xtask test` as root (`root_` names; `root_verbs_` also needs
//! the installed libibverbs.so.1).

mod common;

use std::{path::PathBuf, process::Command, time::Duration};

use common::*;

const CHILD: &str = "RDMATRACE_STACKS_CHILD";

/// Calls `ibv_get_device_list` of the installed libibverbs (loaded at run time, so the test
/// binary does not link it) from a function with a name to find in the stack.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rdmatrace_test_calls_verbs() -> i32 {
    type GetList = unsafe extern "C" fn(*mut i32) -> *mut *mut libc::c_void;
    type FreeList = unsafe extern "C" fn(*mut *mut libc::c_void);
    // SAFETY: dlopen/dlsym with NUL-terminated names; the symbols have these C signatures in
    // rdma-core's <infiniband/verbs.h>; the list is freed with its own free function.
    unsafe {
        let lib = libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW);
        if lib.is_null() {
            return -1;
        }
        let get = libc::dlsym(lib, c"ibv_get_device_list".as_ptr());
        let free = libc::dlsym(lib, c"ibv_free_device_list".as_ptr());
        if get.is_null() || free.is_null() {
            return -1;
        }
        let get: GetList = std::mem::transmute(get);
        let free: FreeList = std::mem::transmute(free);
        let mut n = 0;
        let list = std::hint::black_box(get(&mut n));
        if !list.is_null() {
            free(list);
        }
        n
    }
}

/// Spins on the CPU for `ms` milliseconds, almost all of it in this function's own code (no
/// calls in the inner loop, even in a debug build), so samples land here.
#[no_mangle]
#[inline(never)]
pub extern "C" fn rdmatrace_test_burns_cpu(ms: u64) -> u64 {
    let end = std::time::Instant::now() + Duration::from_millis(ms);
    let mut x = 0u64;
    while std::time::Instant::now() < end {
        let mut i = 0u64;
        while i < 5_000_000 {
            // SAFETY: an empty asm block that only claims to change `x`: keeps the loop.
            unsafe { std::arch::asm!("/* {0} */", inout(reg) x) };
            i += 1;
        }
    }
    x
}

/// Not a test on its own: the child that the tests below record.
#[test]
fn stacks_child() {
    match std::env::var(CHILD).as_deref() {
        // Lives a moment after its call, as a job does: frames are named from the process's
        // mappings while it lives (a process gone within milliseconds of its exec, before the
        // recorder read its maps, keeps `[unknown]` frames; CI under load showed exactly that).
        Ok("verbs") => {
            rdmatrace_test_calls_verbs();
            std::thread::sleep(Duration::from_millis(500));
        }
        Ok("cpu") => {
            rdmatrace_test_burns_cpu(2000);
        }
        // A job that keeps calling: once right away, once 2 s later.
        Ok("verbs-twice") => {
            rdmatrace_test_calls_verbs();
            std::thread::sleep(Duration::from_secs(2));
            rdmatrace_test_calls_verbs();
        }
        // A job already running when the tracer starts: calls once the file named by
        // TRIGGER exists (the tracer is ready), then lives a moment.
        Ok("verbs-when-told") => {
            let Ok(trigger) = std::env::var(TRIGGER) else {
                return;
            };
            for _ in 0..600 {
                if std::path::Path::new(&trigger).exists() {
                    rdmatrace_test_calls_verbs();
                    std::thread::sleep(Duration::from_millis(500));
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        _ => {}
    }
}

/// For `verbs-when-told`: the file whose existence tells the child to call.
const TRIGGER: &str = "RDMATRACE_TEST_TRIGGER";

fn libibverbs_installed() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .any(|d| PathBuf::from(d).join("libibverbs.so.1").exists())
}

/// Records this binary running `stacks_child` in `mode`; returns the folded stacks of `kind`.
fn record_child(mode: &str, extra: &[&str], kind: &str) -> (String, String) {
    record_wrapped(mode, extra, kind, &[], &[])
}

/// [`record_child`], the child started through `wrapper` (e.g. `unshare -m sh -c ...`) with
/// `env` added.
fn record_wrapped(
    mode: &str,
    extra: &[&str],
    kind: &str,
    wrapper: &[&str],
    env: &[(&str, &str)],
) -> (String, String) {
    let dir = test_dir(&format!("stacks-{mode}"));
    let file = dir.path().join(format!("{mode}.rdmt"));
    let f = file.to_str().expect("utf8");
    let me = std::env::current_exe().expect("test binary");
    let mut args = vec!["record", "-o", f];
    args.extend_from_slice(extra);
    args.push("--");
    args.extend_from_slice(wrapper);
    args.extend_from_slice(&[
        me.to_str().expect("utf8"),
        "--exact",
        "stacks_child",
        "--test-threads=1",
    ]);
    let out = Command::new(bin())
        .args(&args)
        .env(CHILD, mode)
        .envs(env.iter().copied())
        .output()
        .expect("run rdmatrace record");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "record failed: {stderr}");
    let fg = run(&["flamegraph", f, "--kind", kind, "--folded", "-o", "-"]);
    assert!(fg.status.success(), "{}\nrecord: {stderr}", fg.stderr);
    (fg.stdout, stderr)
}

#[test]
#[ignore = "needs root and libibverbs.so.1: records uprobes on the installed library; `cargo xtask test` runs it when both hold"]
fn root_verbs_host_verbs_call_stack_names_the_calling_function() {
    assert!(
        libibverbs_installed(),
        "needs libibverbs.so.1 (apt-get install libibverbs1): run through `cargo xtask test`"
    );
    let (folded, stderr) = record_child("verbs", &[], "verbs");
    // Exactly one call, made by our function straight above it.
    let calls: Vec<&str> = folded
        .lines()
        .filter(|l| l.contains(";ibv_get_device_list "))
        .collect();
    assert_eq!(calls.len(), 1, "{folded}\n{stderr}");
    assert!(
        calls[0].ends_with(";rdmatrace_test_calls_verbs;ibv_get_device_list 1"),
        "{folded}"
    );
}

#[test]
#[ignore = "needs root: records with eBPF and perf events; `cargo xtask test` runs it as root"]
fn root_host_cpu_profile_names_the_busy_function() {
    let (folded, stderr) = record_child("cpu", &["--cpu-profile", "--cpu-hz", "99"], "cpu");
    let busy: u64 = folded
        .lines()
        .filter(|l| l.contains(";rdmatrace_test_burns_cpu "))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, n)| n.parse::<u64>().ok()))
        .sum();
    // 2 s at 99 Hz is ~200 samples when the CPU is ours; allow for a loaded machine. The busy
    // function is the innermost user frame of its samples.
    assert!(
        busy >= 10,
        "{busy} samples in the busy loop:\n{folded}\n{stderr}"
    );
    assert!(
        !folded.lines().any(|l| l.starts_with("rdmatrace [")),
        "the recorder sampled itself:\n{folded}"
    );
}

/// The real file behind the installed libibverbs.so.1, and a copy of it (another inode, as a
/// container image would have) in `dir`.
fn libibverbs_copy(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let real = [
        "/usr/lib/x86_64-linux-gnu",
        "/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
    ]
    .iter()
    .map(|d| PathBuf::from(d).join("libibverbs.so.1"))
    .find(|p| p.exists())
    .and_then(|p| std::fs::canonicalize(p).ok())
    .expect("libibverbs.so.1");
    std::fs::create_dir_all(dir).expect("dir");
    let copy = dir.join("libibverbs.so.1");
    std::fs::copy(&real, &copy).expect("copy libibverbs");
    (real, copy)
}

/// The calls of `rdmatrace_test_calls_verbs` in folded verbs stacks.
fn verbs_calls(folded: &str) -> u64 {
    folded
        .lines()
        .filter(|l| l.contains(";rdmatrace_test_calls_verbs;ibv_get_device_list "))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// `sh -c` script for `unshare -m`: bind-mounts `copy` over `real` in the new mount namespace
/// (the image's own library at the standard path), then runs its arguments.
fn own_copy_script(real: &std::path::Path, copy: &std::path::Path) -> String {
    format!(
        "mount --bind {} {} && exec \"$@\"",
        copy.display(),
        real.display()
    )
}

#[test]
#[ignore = "needs root and libibverbs.so.1: probes a container's own copy of the library; `cargo xtask test` runs it when both hold"]
fn root_verbs_a_containers_own_libibverbs_is_probed_at_exec() {
    assert!(libibverbs_installed(), "needs libibverbs.so.1");
    let dir = test_dir("copy-ns");
    let (real, copy) = libibverbs_copy(dir.path());
    // A mount namespace whose libibverbs is the copy at the standard path: the image's own.
    let script = own_copy_script(&real, &copy);
    let (folded, stderr) = record_wrapped(
        "verbs-twice",
        &[],
        "verbs",
        &[
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            &script,
            "sh",
        ],
        &[],
    );
    assert!(
        stderr.contains("verbs probes (") && stderr.contains("also on /proc/"),
        "{stderr}"
    );
    // Found at exec: at least the later call, with its stack.
    let n = verbs_calls(&folded);
    assert!((1..=2).contains(&n), "{n} calls\n{folded}\n{stderr}");
}

#[test]
#[ignore = "needs root and libibverbs.so.1: probes a copy of the library at another path; `cargo xtask test` runs it when both hold"]
fn root_verbs_a_copy_of_libibverbs_at_another_path_is_probed_once_mapped() {
    assert!(libibverbs_installed(), "needs libibverbs.so.1");
    let dir = test_dir("copy-path");
    let (_, copy) = libibverbs_copy(&dir.path().join("lib"));
    let lib_dir = copy
        .parent()
        .expect("dir")
        .to_str()
        .expect("utf8")
        .to_string();
    let (folded, stderr) = record_wrapped(
        "verbs-twice",
        &[],
        "verbs",
        &[],
        &[("LD_LIBRARY_PATH", &lib_dir)],
    );
    assert!(stderr.contains("also on /proc/"), "{stderr}");
    assert!(stderr.contains(&lib_dir), "{stderr}");
    // Found in its maps after its first call: the second call is seen, with its stack.
    let n = verbs_calls(&folded);
    assert!((1..=2).contains(&n), "{n} calls\n{folded}\n{stderr}");
}

#[test]
#[ignore = "needs root and libibverbs.so.1: probes the own copy of the library of a container already running; `cargo xtask test` runs it when both hold"]
fn root_verbs_a_running_containers_own_libibverbs_is_probed_at_start() {
    assert!(libibverbs_installed(), "needs libibverbs.so.1");
    let dir = test_dir("copy-running");
    let (real, copy) = libibverbs_copy(dir.path());
    let trigger = dir.path().join("go");
    let file = dir.path().join("running.rdmt");
    let f = file.to_str().expect("utf8");
    // A mount namespace whose libibverbs is the copy at the standard path, started (and its
    // library mapped) before the tracer.
    let script = own_copy_script(&real, &copy);
    let me = std::env::current_exe().expect("test binary");
    let mut job = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script, "sh"])
        .args([
            me.to_str().expect("utf8"),
            "--exact",
            "stacks_child",
            "--test-threads=1",
        ])
        .env(CHILD, "verbs-when-told")
        .env(TRIGGER, &trigger)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start the job");
    std::thread::sleep(Duration::from_millis(300));
    let tracer = common::start(&["record", "-o", f], Duration::from_secs(60));
    std::fs::write(&trigger, b"").expect("trigger");
    let status = job.wait().expect("job");
    assert!(status.success(), "the job failed: {status}");
    let done = tracer.stop();
    assert!(
        done.stderr
            .contains(&format!("also on /proc/{}/root", job.id())),
        "{}",
        done.stderr
    );
    let fg = run(&["flamegraph", f, "--kind", "verbs", "--folded", "-o", "-"]);
    assert!(fg.status.success(), "{}", fg.stderr);
    let n = verbs_calls(&fg.stdout);
    assert_eq!(n, 1, "{}\n{}", fg.stdout, done.stderr);
}
