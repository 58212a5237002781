use super::*;

fn owner() -> Owner {
    Owner {
        pid: 4242,
        start_time: 123_456,
        boot_id: "b00t".into(),
    }
}

fn stat(pid: u32, comm: &str, state: char, start: u64) -> String {
    // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
    // stime cutime cstime priority nice num_threads itrealvalue starttime vsize ...
    format!(
        "{pid} ({comm}) {state} 1 {pid} {pid} 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 {start} \
         123456 789 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0"
    )
}

fn counter(port: u32, id: u32, qpns: &[u32]) -> QpCounter {
    QpCounter {
        dev: "rxe0".into(),
        port,
        id,
        pid: 0,
        qpns: qpns.to_vec(),
        values: Vec::new(),
    }
}

#[test]
fn start_time_is_field_22_even_with_parentheses_and_spaces_in_the_name() {
    assert_eq!(
        parse_stat(&stat(7, "rdmatrace", 'S', 98765)),
        Some(('S', 98765))
    );
    assert_eq!(parse_stat(&stat(7, "a) (b c", 'R', 5)), Some(('R', 5)));
    assert_eq!(parse_stat("7 (cut"), None);
    assert_eq!(parse_stat("7 (x) S 1 2"), None);
}

#[test]
fn the_real_stat_of_this_process_parses() {
    let me = this_process().expect("own stat");
    assert_eq!(me.pid, std::process::id());
    let s = stat_of(me.pid).expect("stat");
    assert!(owner_alive(&me, &boot_id(), Some(&s)));
}

#[test]
fn an_owner_lives_only_with_its_pid_start_time_and_boot() {
    let o = owner();
    assert!(owner_alive(
        &o,
        "b00t",
        Some(&stat(4242, "rdmatrace", 'S', 123_456))
    ));
    // The pid went away.
    assert!(!owner_alive(&o, "b00t", None));
    // The pid was recycled by a later process.
    assert!(!owner_alive(
        &o,
        "b00t",
        Some(&stat(4242, "bash", 'S', 999_999))
    ));
    // Killed, not yet reaped.
    assert!(!owner_alive(
        &o,
        "b00t",
        Some(&stat(4242, "rdmatrace", 'Z', 123_456))
    ));
    // Another boot (a /run that is not a tmpfs).
    assert!(!owner_alive(
        &o,
        "other",
        Some(&stat(4242, "rdmatrace", 'S', 123_456))
    ));
    // An unreadable stat is no proof of life.
    assert!(!owner_alive(&o, "b00t", Some("garbage")));
}

#[test]
fn a_journal_round_trips_and_names_its_changes() {
    let mut j = Journal::new(owner());
    assert!(j.is_empty());
    j.ports.push(PortChange {
        dev: "rxe0".into(),
        dev_index: 3,
        port: 1,
        prev_mode: 0,
        prev_mask: 0,
        change: Change::Auto { mask: 3 },
    });
    for qpn in [0x11, 0x12, 0x13] {
        j.push_bound("rxe1", 4, 1, Bound { qpn, counter: None });
    }
    assert_eq!(j.ports.len(), 2, "one manual entry per port");
    j.settle_bound(4, 1, 0x11, Some(7));
    j.settle_bound(4, 1, 0x13, None);
    assert!(j.has_bound(4, 1, 0x12));
    assert!(!j.has_bound(4, 1, 0x13), "a failed bind is forgotten");
    assert!(!j.has_bound(3, 1, 0x11));
    assert_eq!(
        j.ports[1].change,
        Change::Manual {
            bound: vec![
                Bound {
                    qpn: 0x11,
                    counter: Some(7)
                },
                Bound {
                    qpn: 0x12,
                    counter: None
                }
            ]
        }
    );
    let text = to_json(&j);
    assert!(text.contains("\"kind\": \"auto\""), "{text}");
    assert!(text.contains("\"start_time\": 123456"), "{text}");
    assert_eq!(from_json(Path::new("j"), &text).expect("parse"), j);
}

#[test]
fn a_journal_of_another_version_or_damaged_is_refused_with_its_path() {
    let text = to_json(&Journal::new(owner())).replace("\"version\": 1", "\"version\": 9");
    let e = from_json(Path::new("/run/rdmatrace/x.json"), &text).expect_err("version");
    assert!(
        e.to_string()
            .contains("/run/rdmatrace/x.json: journal version 9"),
        "{e}"
    );
    let e =
        from_json(Path::new("/run/rdmatrace/x.json"), "{\"version\": 1, \"own").expect_err("cut");
    assert!(
        e.to_string()
            .starts_with("cannot parse /run/rdmatrace/x.json"),
        "{e}"
    );
}

#[test]
fn journal_names_are_recognized_and_temporary_files_are_not() {
    assert_eq!(file_name(&owner()), "bindings-4242-123456.json");
    assert!(is_journal_name("bindings-4242-123456.json"));
    assert!(!is_journal_name("bindings-4242-123456.json.tmp"));
    assert!(!is_journal_name("bindings-4242.json"));
    assert!(!is_journal_name("bindings--1.json"));
    assert!(!is_journal_name("lock"));
}

#[test]
fn auto_mode_is_turned_off_only_when_it_is_still_ours() {
    use nldev::{COUNTER_MODE_AUTO as AUTO, COUNTER_MODE_MANUAL as MANUAL};
    assert_eq!(auto_undo(3, (AUTO, 3)), AutoUndo::TurnOff);
    assert_eq!(auto_undo(3, (0, 0)), AutoUndo::AlreadyOff);
    assert_eq!(
        auto_undo(3, (AUTO, 1)),
        AutoUndo::ChangedSince {
            mode: AUTO,
            mask: 1
        }
    );
    assert_eq!(
        auto_undo(3, (MANUAL, 0)),
        AutoUndo::ChangedSince {
            mode: MANUAL,
            mask: 0
        }
    );
}

#[test]
fn after_auto_mode_every_counter_of_the_port_is_unbound_and_no_other_port() {
    let cs = [
        counter(1, 5, &[0x11, 0x12]),
        counter(2, 6, &[0x13]),
        counter(1, 7, &[0x14]),
    ];
    assert_eq!(auto_unbinds(1, &cs), vec![(5, 0x11), (5, 0x12), (7, 0x14)]);
    assert_eq!(auto_unbinds(3, &cs), vec![]);
}

#[test]
fn manual_bindings_are_unbound_only_where_they_still_exist() {
    let bound = [
        Bound {
            qpn: 0x11,
            counter: Some(5),
        },
        // The QP was destroyed: its counter went with it.
        Bound {
            qpn: 0x12,
            counter: Some(6),
        },
        // Its counter id now counts someone else's QP.
        Bound {
            qpn: 0x13,
            counter: Some(7),
        },
        // Killed during the bind: any counter of the port holding the QP.
        Bound {
            qpn: 0x14,
            counter: None,
        },
    ];
    let cs = [
        counter(1, 5, &[0x11]),
        counter(1, 7, &[0x20]),
        counter(1, 8, &[0x14]),
        counter(2, 9, &[0x11]),
    ];
    assert_eq!(manual_unbinds(1, &bound, &cs), vec![(5, 0x11), (8, 0x14)]);
}

#[test]
fn recovery_says_what_was_undone_in_one_line_per_port() {
    let pc = PortChange {
        dev: "rxe0".into(),
        dev_index: 3,
        port: 1,
        prev_mode: 0,
        prev_mask: 0,
        change: Change::Auto { mask: 3 },
    };
    assert_eq!(
        recovery_line(77, &pc, &PortOutcome::AutoOff { unbound: 0 }),
        "undid a counter binding left by a killed run (pid 77): rxe0 port 1 auto mode off"
    );
    assert_eq!(
        recovery_line(77, &pc, &PortOutcome::AutoOff { unbound: 2 }),
        "undid a counter binding left by a killed run (pid 77): rxe0 port 1 auto mode off, \
         2 counters unbound"
    );
    assert_eq!(
        recovery_line(77, &pc, &PortOutcome::ManualUnbound { unbound: 1 }),
        "undid a counter binding left by a killed run (pid 77): rxe0 port 1 1 counter unbound"
    );
    let left = recovery_line(77, &pc, &PortOutcome::ChangedSince { mode: 2, mask: 0 });
    assert!(left.contains("left as it is"), "{left}");
    assert!(!left.contains('\n'));
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmatrace-journal-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn the_file_is_private_written_whole_listed_and_removed() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("file").join("rdmatrace");
    let mut jf = JournalFile::for_this_process(&dir).expect("journal");
    let mode = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode(&dir), 0o700);
    assert!(!jf.path.exists(), "nothing written before a change");
    assert_eq!(list(&dir).expect("list"), Vec::<PathBuf>::new());
    jf.journal.push_bound(
        "rxe0",
        1,
        1,
        Bound {
            qpn: 0x11,
            counter: None,
        },
    );
    jf.save().expect("save");
    assert_eq!(mode(&jf.path), 0o600);
    assert_eq!(read(&jf.path).expect("read"), jf.journal);
    // A temporary file is not a journal.
    std::fs::write(dir.join("bindings-1-2.json.tmp"), "{").expect("tmp");
    assert_eq!(list(&dir).expect("list"), vec![jf.path.clone()]);
    jf.remove().expect("remove");
    assert_eq!(list(&dir).expect("list"), Vec::<PathBuf>::new());
    let _ = std::fs::remove_dir_all(scratch("file"));
}

#[test]
fn a_shared_directory_is_not_trusted() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = scratch("shared");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let e = ensure_dir(&dir).expect_err("0777 is not private");
    assert!(
        matches!(e, JournalError::UntrustedDir { mode: 0o777, .. }),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_directory_means_no_journal() {
    assert_eq!(list(&scratch("none")).expect("list"), Vec::<PathBuf>::new());
}
