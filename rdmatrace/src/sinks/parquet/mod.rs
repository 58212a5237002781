//! `export --format parquet`: recordings as Parquet tables (docs/parquet.md), so a fleet's
//! recordings can be queried with DuckDB, Spark or ClickHouse. One file per table in the output
//! folder: `events` (every record, as [`EventsSink`] replays it), and from the joined analysis
//! (`correlate::fleet`) `hosts`, `processes`, `qps`, `connections`, `retransmits` and
//! `faults` ([`tables`]). Every row has its `host`; times are UTC on the common clock
//! (timestamp[ns, UTC]).

pub mod tables;

use std::{fs::File, io, os::unix::fs::OpenOptionsExt, path::Path, sync::Arc};

use ::parquet::{arrow::ArrowWriter, basic::Compression, file::properties::WriterProperties};
use arrow_array::{
    ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};

use super::{jsonl, Sink};
use crate::{correlate::Correlator, event::Record};

/// Rows an events table buffers before writing a row group.
const BATCH_ROWS: usize = 64 * 1024;

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// The UTC timestamp type of every time column.
pub fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into()))
}

/// A Parquet file being written (Snappy-compressed row groups).
pub struct TableFile {
    schema: SchemaRef,
    writer: ArrowWriter<File>,
}

impl TableFile {
    pub fn create(dir: &Path, name: &str, fields: Vec<Field>) -> io::Result<TableFile> {
        let schema: SchemaRef = Arc::new(Schema::new(fields));
        // Readable by its owner only, as recordings are (names and ids of the traced host).
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(dir.join(format!("{name}.parquet")))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let writer = ArrowWriter::try_new(file, schema.clone(), Some(props)).map_err(io_err)?;
        Ok(TableFile { schema, writer })
    }

    pub fn write(&mut self, columns: Vec<ArrayRef>) -> io::Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), columns).map_err(io_err)?;
        self.writer.write(&batch).map_err(io_err)
    }

    pub fn close(self) -> io::Result<()> {
        self.writer.close().map(|_| ()).map_err(io_err)
    }
}

pub fn strings<'a>(v: impl IntoIterator<Item = Option<&'a str>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<StringArray>())
}

pub fn u64s(v: impl IntoIterator<Item = Option<u64>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<UInt64Array>())
}

pub fn u32s(v: impl IntoIterator<Item = Option<u32>>) -> ArrayRef {
    Arc::new(v.into_iter().collect::<UInt32Array>())
}

pub fn times(v: impl IntoIterator<Item = Option<u64>>) -> ArrayRef {
    let a: TimestampNanosecondArray = v
        .into_iter()
        .map(|t| t.map(|t| i64::try_from(t).unwrap_or(i64::MAX)))
        .collect();
    Arc::new(a.with_timezone("UTC"))
}

/// One row of `events`.
struct EventRow {
    time: u64,
    ts_ns: u64,
    kind: &'static str,
    pid: u32,
    tid: u32,
    comm: String,
    dev: Option<String>,
    qpn: Option<u32>,
    container: Option<String>,
    data: String,
}

/// Every replayed record as a row of `events` (the JSON Lines event's fields, its `data` as
/// JSON text), for host `host`. The replay's clock should already be the common one.
pub struct EventsSink {
    host: String,
    file: Option<TableFile>,
    rows: Vec<EventRow>,
    pub written: u64,
}

pub fn events_fields() -> Vec<Field> {
    vec![
        Field::new("host", DataType::Utf8, false),
        Field::new("time", utc(), false),
        Field::new("ts_ns", DataType::UInt64, false),
        Field::new("type", DataType::Utf8, false),
        Field::new("pid", DataType::UInt32, false),
        Field::new("tid", DataType::UInt32, false),
        Field::new("comm", DataType::Utf8, false),
        Field::new("dev", DataType::Utf8, true),
        Field::new("qpn", DataType::UInt32, true),
        Field::new("container", DataType::Utf8, true),
        Field::new("data", DataType::Utf8, false),
    ]
}

impl EventsSink {
    /// Appends to `file` (the events table all hosts share).
    pub fn new(host: &str, file: TableFile) -> EventsSink {
        EventsSink {
            host: host.to_string(),
            file: Some(file),
            rows: Vec::new(),
            written: 0,
        }
    }

    /// The table file back, everything buffered written.
    pub fn into_file(mut self) -> io::Result<TableFile> {
        self.flush()?;
        self.file
            .take()
            .ok_or_else(|| io_err("events table already closed"))
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.rows);
        let n = rows.len();
        let columns = vec![
            strings(std::iter::repeat_n(Some(self.host.as_str()), n)),
            times(rows.iter().map(|r| Some(r.time))),
            u64s(rows.iter().map(|r| Some(r.ts_ns))),
            strings(rows.iter().map(|r| Some(r.kind))),
            u32s(rows.iter().map(|r| Some(r.pid))),
            u32s(rows.iter().map(|r| Some(r.tid))),
            strings(rows.iter().map(|r| Some(r.comm.as_str()))),
            strings(rows.iter().map(|r| r.dev.as_deref())),
            u32s(rows.iter().map(|r| r.qpn)),
            strings(rows.iter().map(|r| r.container.as_deref())),
            strings(rows.iter().map(|r| Some(r.data.as_str()))),
        ];
        self.file
            .as_mut()
            .ok_or_else(|| io_err("events table closed"))?
            .write(columns)?;
        self.written += n as u64;
        Ok(())
    }
}

impl Sink for EventsSink {
    fn record(&mut self, rec: &Record, state: &Correlator) -> io::Result<()> {
        let place = state.place(rec);
        let v = jsonl::to_json(rec, place);
        self.rows.push(EventRow {
            time: rec.wall_ns,
            ts_ns: rec.ts_ns,
            kind: rec.body.type_name(),
            pid: rec.pid,
            tid: rec.tid,
            comm: rec.comm.to_string(),
            dev: rec.dev().map(str::to_string),
            qpn: rec.qpn(),
            container: place.and_then(|p| p.container()).map(str::to_string),
            data: v["data"].to_string(),
        });
        if self.rows.len() >= BATCH_ROWS {
            self.flush()?;
        }
        Ok(())
    }

    fn finish(&mut self, _state: &Correlator) -> io::Result<()> {
        self.flush()
    }
}
