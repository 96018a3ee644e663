//! The `toolsrv` command: parses the command line and hands off to [`toolsrv::cli`].

fn main() -> std::process::ExitCode {
    toolsrv::cli::main()
}
