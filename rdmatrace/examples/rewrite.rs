//! `cargo run -p rdmatrace --example rewrite -- [--storage] IN OUT [VERSION]`: writes recording
//! IN again as OUT in format VERSION (default: the current one) and prints both sizes per record.
//! With `--storage`, OUT is packed as `record` packs a finished recording (merged zstd chunks,
//! format 7 on); without, chunks stay where they were, LZ4. Used to
//! measure the format on real recordings and to make fuzz seeds; the round trip is tested in
//! `tests/rewrite.rs`.

use std::process::ExitCode;

use rdmatrace::recording::{
    reader::Recording,
    repack::storage_level,
    writer::{rewrite, Packing},
    Entry, VERSION,
};

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let storage = args.first().is_some_and(|a| a == "--storage");
    if storage {
        args.remove(0);
    }
    let (input, output, version) = match &args[..] {
        [i, o] => (i, o, VERSION),
        [i, o, v] => match v.parse() {
            Ok(v) => (i, o, v),
            Err(_) => return usage(),
        },
        _ => return usage(),
    };
    match run(input, output, version, storage) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rewrite: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: rewrite [--storage] IN OUT [VERSION]");
    ExitCode::from(2)
}

fn run(input: &str, output: &str, version: u32, storage: bool) -> anyhow::Result<()> {
    let data = std::fs::read(input)?;
    let in_len = data.len();
    let rec = Recording::from_bytes(data)?;
    let mut records = 0u64;
    rec.replay(|e| records += u64::from(!matches!(e, Entry::Symbol { .. })));
    let file = std::fs::File::create(output)?;
    let packing = if storage {
        Packing::Storage {
            zstd_level: storage_level(in_len as u64),
        }
    } else {
        Packing::Keep
    };
    let (_, bytes, problems) = rewrite(&rec, file, version, packing)?;
    for p in &problems {
        eprintln!("rewrite: {input}: {p}");
    }
    let per = |b: u64| b as f64 / records.max(1) as f64;
    println!(
        "{input} (v{}): {in_len} bytes, {records} records, {:.1} bytes/record -> {output} (v{version}): {bytes} bytes, {:.1} bytes/record",
        rec.version,
        per(in_len as u64),
        per(bytes)
    );
    Ok(())
}
