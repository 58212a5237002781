//! `export --format parquet`: the tables written from recordings (the two-host fixtures, see
//! tests/fleet.rs), read back with the parquet crate, and queried with a real DuckDB
//! (`duckdb_*`, run by `cargo xtask test` when the bootstrap's venv has it) to give the same
//! connection table and retransmit blame as `report --json`.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use common::*;
use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::Value;

const TABLES: [&str; 7] = [
    "events",
    "hosts",
    "processes",
    "qps",
    "connections",
    "retransmits",
    "faults",
];

fn fixtures(name: &str) -> [String; 2] {
    ["a", "b"].map(|h| {
        format!(
            "{}/../tests/fixtures/two-host-{name}-{h}.rdmt",
            env!("CARGO_MANIFEST_DIR")
        )
    })
}

fn export(files: &[String], dir: &Path) {
    let mut args = vec!["export".to_string()];
    args.extend(files.iter().cloned());
    args.extend(["-o".into(), dir.display().to_string()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run(&args);
    assert!(out.status.success(), "{}", out.stderr);
}

fn report(files: &[String]) -> Value {
    let mut args = vec!["report"];
    args.extend(files.iter().map(String::as_str));
    args.push("--json");
    let out = run(&args);
    assert!(out.status.success(), "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).expect("json");
    v["data"].clone()
}

/// (column names, rows) of a table.
fn read(dir: &Path, table: &str) -> (Vec<String>, i64) {
    let file = std::fs::File::open(dir.join(format!("{table}.parquet"))).expect(table);
    let r = SerializedFileReader::new(file).expect("a parquet file");
    let meta = r.metadata();
    let cols = meta
        .file_metadata()
        .schema_descr()
        .columns()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    (cols, meta.file_metadata().num_rows())
}

#[test]
fn export_writes_every_table_with_a_host_column_and_rows_for_what_was_recorded() {
    let dir = test_dir("export-tables");
    let files = fixtures("loss-b");
    export(&files, dir.path());
    for t in TABLES {
        let (cols, _) = read(dir.path(), t);
        let host = if matches!(t, "connections" | "faults") {
            "connection"
        } else {
            "host"
        };
        assert!(cols.iter().any(|c| c == host), "{t}: {cols:?}");
    }
    let replay: usize = files
        .iter()
        .map(|f| {
            run(&["trace", "--input", f, "--json"])
                .stdout
                .lines()
                .count()
        })
        .sum();
    assert_eq!(
        read(dir.path(), "events").1,
        replay as i64,
        "every event once"
    );
    // The RC connection and its TCP control channel, two ends each.
    assert_eq!(read(dir.path(), "connections").1, 4);
    assert_eq!(read(dir.path(), "faults").1, 1);
    assert_eq!(read(dir.path(), "hosts").1, 2);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(dir.path().join("events.parquet"))
            .expect("events")
            .permissions(),
    );
    assert_eq!(
        mode & 0o777,
        0o600,
        "readable by its owner only, as recordings"
    );
}

fn duckdb_python() -> PathBuf {
    std::env::var_os("RDMATRACE_DUCKDB_PYTHON").map_or_else(
        || {
            let home = std::env::var_os("HOME").unwrap_or_else(|| "/root".into());
            PathBuf::from(home).join(".cache/rdmatrace/duckdb/bin/python")
        },
        PathBuf::from,
    )
}

/// Rows of `sql` (run by DuckDB in `dir`) as JSON arrays.
fn duckdb(dir: &Path, sql: &str) -> Vec<Value> {
    let script = format!(
        "import duckdb, json, os\nos.chdir({dir:?})\nfor r in duckdb.sql({sql:?}).fetchall():\n    print(json.dumps(r, default=str))\n",
        dir = dir.display().to_string()
    );
    let out = Command::new(duckdb_python())
        .args(["-c", &script])
        .output()
        .expect("run duckdb's python");
    assert!(
        out.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("row"))
        .collect()
}

#[test]
#[ignore = "needs duckdb: DuckDB's Python package in the bootstrap's venv"]
fn duckdb_queries_give_the_reports_connection_table_and_blame() {
    for name in ["loss-a", "peer-dead"] {
        let dir = test_dir("export-duckdb");
        let files = fixtures(name);
        export(&files, dir.path());
        let r = report(&files);
        // Connection table: (id, host, dev, qpn, pid, comm) per end.
        let got = duckdb(
            dir.path(),
            "select connection, host, dev, qpn, pid, comm from 'connections.parquet' \
             order by connection, \"end\"",
        );
        let want: Vec<Value> = r["connections"]
            .as_array()
            .expect("connections")
            .iter()
            .flat_map(|c| {
                c["ends"].as_array().into_iter().flatten().map(move |e| {
                    serde_json::json!([c["id"], e["host"], e["dev"], e["qpn"], e["pid"], e["comm"]])
                })
            })
            .collect();
        assert_eq!(got, want, "{name}");
        // Retransmit blame: each host's rows, most first.
        let got = duckdb(
            dir.path(),
            "select host, pid, transport, target, count from 'retransmits.parquet' \
             order by host, count desc, target",
        );
        let mut want: Vec<Value> = Vec::new();
        for h in r["hosts"].as_array().expect("hosts") {
            let mut rows: Vec<Value> = h["report"]["blame"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|b| {
                    serde_json::json!([
                        h["host"],
                        b["pid"],
                        b["transport"],
                        b["target"],
                        b["count"]
                    ])
                })
                .collect();
            rows.sort_by(|a, b| {
                (b[4].as_u64(), a[3].as_str()).cmp(&(a[4].as_u64(), b[3].as_str()))
            });
            want.extend(rows);
        }
        want.sort_by(|a, b| a[0].as_str().cmp(&b[0].as_str()));
        assert_eq!(got, want, "{name}");
        assert!(!got.is_empty(), "{name}: some retransmits were recorded");
        // Faults agree, on the common clock.
        let got = duckdb(
            dir.path(),
            "select kind, from_host, to_host from 'faults.parquet' order by time",
        );
        let want: Vec<Value> = r["faults"]
            .as_array()
            .expect("faults")
            .iter()
            .map(|f| serde_json::json!([f["kind"], f["from_host"], f["to_host"]]))
            .collect();
        assert_eq!(got, want, "{name}");
        // Times are UTC timestamps on the common clock: b's events line up with a's.
        let spans = duckdb(
            dir.path(),
            "select host, epoch_ms(min(time)::timestamptz) from 'events.parquet' group by host order by host",
        );
        let t = |i: usize| spans[i][1].as_f64().unwrap_or_default();
        assert!((t(0) - t(1)).abs() < 2000.0, "{spans:?}");
    }
}

#[test]
#[ignore = "needs duckdb: DuckDB's Python package in the bootstrap's venv"]
fn duckdb_runs_the_example_queries_of_the_docs() {
    let doc = include_str!("../../docs/parquet.md");
    let queries: Vec<&str> = doc
        .split("```sql\n")
        .skip(1)
        .filter_map(|b| b.split("```").next())
        .collect();
    assert_eq!(
        queries.len(),
        3,
        "docs/parquet.md has three example queries"
    );
    let dir = test_dir("export-docs");
    export(&fixtures("peer-dead"), dir.path());
    let rows: Vec<usize> = queries
        .iter()
        .map(|q| duckdb(dir.path(), q.trim().trim_end_matches(';')).len())
        .collect();
    // One connection; its QP's retransmits joined to the peer_dead fault; events around it.
    assert_eq!(rows[0], 1, "{rows:?}");
    let blame = duckdb(dir.path(), queries[1].trim().trim_end_matches(';'));
    assert!(
        blame.iter().any(|r| r[5] == "peer_dead" && r[0] == "lab-a"),
        "{blame:?}"
    );
    assert!(rows[2] > 0, "{rows:?}");
}
