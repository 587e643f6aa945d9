fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(nodecert::cli::main_with_args(std::env::args().collect()))
}
