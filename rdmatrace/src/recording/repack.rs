//! Packing a finished recording for storage. The recorder writes an LZ4 chunk every second, so a
//! kill -9 loses at most a second of events; a long, quiet recording is then many small chunks,
//! each paying its own chunk header, task table and cold compressor start, and LZ4 is built for
//! speed, not size. On a clean stop `record` writes the same entries again with the chunks
//! merged (up to 1 MiB) and compressed with zstd (format 7, [`super::FLAG_ZSTD`]) into a file
//! beside the recording, and renames it over the original: whenever it is interrupted, one
//! complete recording is left under the name (a leftover `NAME.repack-tmp` is removed by the
//! next repack of NAME, before anything else, whether or not that one packs).

use std::{
    fs::{self, File, OpenOptions},
    io::{self, BufWriter, Read, Seek, SeekFrom},
    os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt},
    path::{Path, PathBuf},
};

use super::{
    reader::Recording,
    writer::{rewrite, Packing},
    CHUNK_HEADER_LEN, CHUNK_MAGIC, FLAG_ZSTD, VERSION,
};

/// Larger recordings are left as written (their chunks are mostly full; the rewrite would
/// make the user wait at the end).
pub const REPACK_MAX: u64 = 64 << 20;

/// What a repack did.
#[derive(Debug, PartialEq, Eq)]
pub enum Repacked {
    /// The recording was replaced by its repacked copy.
    Done { before: u64, after: u64 },
    /// Left as it was, and why.
    Left(String),
}

/// The temporary file a repack of `path` writes.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".repack-tmp");
    path.with_file_name(name)
}

/// The zstd level a recording of `len` bytes (as the recorder wrote it, LZ4) is packed at: the
/// strongest for the usual small ones, faster ones as they grow (level 19 packs a few MB/s, 12
/// about 50 MB/s, 9 about 100 MB/s, 3 several hundred, of the entries, which are 5 to 8 times
/// the LZ4 file), so that packing even 64 MiB stays within seconds.
pub fn storage_level(len: u64) -> i32 {
    match len {
        0..=0x1_0000 => 19,
        0x1_0001..=0x40_0000 => 12,
        0x40_0001..=0x100_0000 => 9,
        _ => 3,
    }
}

/// Packs the recording at `path` for storage (a regular file of this format version, with no
/// other hard link, at most [`REPACK_MAX`] bytes); keeps its mode and owner. A damaged
/// recording, one already packed, or one the packing would not make smaller, is left alone.
pub fn repack_file(path: &Path) -> io::Result<Repacked> {
    let left = |why: &str| Ok(Repacked::Left(why.to_string()));
    let meta = fs::symlink_metadata(path)?;
    if !meta.file_type().is_file() {
        return left("not a regular file");
    }
    // A killed merge's leftover goes first, whatever this merge then does.
    let tmp = temp_path(path);
    if fs::symlink_metadata(&tmp).is_ok_and(|m| m.file_type().is_file()) {
        fs::remove_file(&tmp)?;
    }
    if meta.nlink() > 1 {
        return left("it has other hard links");
    }
    if meta.len() > REPACK_MAX {
        return left("larger than 64 MiB");
    }
    let rec = Recording::open(path).map_err(io::Error::other)?;
    if rec.version != VERSION {
        return left("written in another format version");
    }
    // Counted from the chunk headers alone: the rewrite below is the one pass that decodes
    // (and finds any damage inside a chunk).
    match chunks_laid_out(path, rec.body_offset() as u64, meta.len())? {
        None => return left("damaged"),
        Some(Chunks { count: 0, .. }) => return left("no chunks"),
        Some(Chunks { zstd, count }) if zstd == count => return left("packed already"),
        Some(_) => {}
    }
    // Streamed to the new file (never the whole recording in memory); from here on, the
    // temp file is ours to remove whatever happens.
    let file = create_beside(&tmp, &meta)?;
    let packing = Packing::Storage {
        zstd_level: storage_level(meta.len()),
    };
    let merged =
        rewrite(&rec, BufWriter::new(file), VERSION, packing).and_then(|(out, after, problems)| {
            let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
            file.sync_all()?;
            Ok((after, problems))
        });
    let after = match merged {
        Ok((after, problems)) if problems.is_empty() && after < meta.len() => after,
        other => {
            let _ = fs::remove_file(&tmp);
            return match other {
                Ok((_, problems)) if !problems.is_empty() => left("damaged"),
                Ok(_) => left("packing would not make it smaller"),
                Err(e) => Err(e),
            };
        }
    };
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    // The rename itself survives a crash once the directory is synced.
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let _ = File::open(dir).and_then(|d| d.sync_all());
    Ok(Repacked::Done {
        before: meta.len(),
        after,
    })
}

/// The chunks of a recording, as their headers say.
struct Chunks {
    count: u64,
    /// Of them, compressed with zstd.
    zstd: u64,
}

/// The chunks that follow the header at `body` in the file at `path` of `len` bytes, walking
/// their headers (magic, flags and stored length) without reading their payloads; `None` when
/// the walk does not end exactly at the end of the file.
fn chunks_laid_out(path: &Path, body: u64, len: u64) -> io::Result<Option<Chunks>> {
    let mut f = File::open(path)?;
    let (mut at, mut n, mut zstd) = (body, 0u64, 0u64);
    let mut head = [0u8; CHUNK_HEADER_LEN];
    while at < len {
        if len - at < CHUNK_HEADER_LEN as u64 {
            return Ok(None);
        }
        f.seek(SeekFrom::Start(at))?;
        f.read_exact(&mut head)?;
        if &head[..4] != CHUNK_MAGIC {
            return Ok(None);
        }
        let flags = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        let stored = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
        at += CHUNK_HEADER_LEN as u64 + u64::from(stored);
        n += 1;
        zstd += u64::from(flags == FLAG_ZSTD);
    }
    Ok((at == len).then_some(Chunks { count: n, zstd }))
}

/// Creates the new file `tmp` with the original's mode and owner.
fn create_beside(tmp: &Path, original: &fs::Metadata) -> io::Result<File> {
    let f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(original.mode() & 0o7777)
        .open(tmp)?;
    let owned = (|| {
        // The mode asked for at creation is cut by the umask; the original's is kept exactly.
        f.set_permissions(fs::Permissions::from_mode(original.mode() & 0o7777))?;
        if (original.uid(), original.gid()) != current_owner(&f)? {
            std::os::unix::fs::fchown(&f, Some(original.uid()), Some(original.gid()))?;
        }
        Ok(())
    })();
    if let Err(e) = owned {
        let _ = fs::remove_file(tmp);
        return Err(e);
    }
    Ok(f)
}

fn current_owner(f: &File) -> io::Result<(u32, u32)> {
    let m = f.metadata()?;
    Ok((m.uid(), m.gid()))
}
