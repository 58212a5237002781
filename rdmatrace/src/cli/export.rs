//! `export`'s arguments.

use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// Recordings from `rdmatrace record` (one per host; paired and clock-aligned as `report`).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// The folder to write the tables into (created; existing tables are replaced).
    #[arg(long, short = 'o')]
    pub output: PathBuf,
    /// The table format.
    #[arg(long, value_enum, default_value_t = ExportFormatArg::Parquet)]
    pub format: ExportFormatArg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExportFormatArg {
    /// Apache Parquet, one file per table, Snappy-compressed.
    Parquet,
}
