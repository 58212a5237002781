use std::{io::ErrorKind, process::ExitCode};

use anyhow::anyhow;
use clap::Parser as _;
use rdmatrace::{
    cli::{Cli, Command},
    commands,
};

fn run() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    match cli.command {
        Command::Trace(args) => commands::trace::run(
            &args.to_config().map_err(|e| anyhow!(e))?,
            args.input.as_deref(),
        ),
        Command::Record(args) => commands::record::run(&args.to_config().map_err(|e| anyhow!(e))?),
        Command::Doctor { output } => commands::doctor::run(output.json()),
        Command::Report { files, output } => commands::report::run(&files, output.json()),
        Command::Verdict(args) => {
            commands::verdict::run(&args.to_config().map_err(|e| anyhow!(e))?)
        }
        Command::Top(args) => commands::top::run(&args.to_config().map_err(|e| anyhow!(e))?),
        Command::Timeline(args) => commands::timeline::run(&args.to_config()),
        Command::Export(args) => commands::export::run(&args.files, &args.output),
        Command::Flamegraph(args) => commands::flamegraph::run(&args.to_config()),
        Command::Serve(args) => commands::serve::run(&args.to_config().map_err(|e| anyhow!(e))?),
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) => {
            // A closed pipe (`rdmatrace trace | head`) is a normal way to stop.
            let broken_pipe = e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
            });
            if broken_pipe {
                return ExitCode::SUCCESS;
            }
            eprintln!("rdmatrace: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
