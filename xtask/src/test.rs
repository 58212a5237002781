pub fn run(_r: bool, _h: bool) -> anyhow::Result<std::process::ExitCode> { todo!() }
