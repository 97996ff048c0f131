//! `collbench`: see `collbench --help`.

fn main() -> std::process::ExitCode {
    bench_cli::app::main()
}
