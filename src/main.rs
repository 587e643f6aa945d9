fn main() -> std::process::ExitCode {
    // A reader that stops early (`nodecert inventory --json | head`) ends nodecert quietly, as it
    // ends any Unix tool, instead of a panic in println!: Rust starts with SIGPIPE ignored.
    // SAFETY: called first, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Before any thread and any CUDA: an MPS control daemon would make nodecert's CUDA work a
    // client sharing the GPUs through its server (platform::mps).
    nodecert::platform::mps::go_around();
    // And before CUDA too: settings made for training jobs would change what it measures.
    nodecert::platform::cuda_env::set_aside();
    let code = nodecert::cli::main_with_args(std::env::args_os().collect());
    if nodecert::backend::cuda::thread_abandoned() {
        // A measurement hung and its thread is stuck inside the driver. Evidence and reports are
        // written; leave now, without the C library's exit handlers (libcuda's and NCCL's could
        // wait for that thread forever and turn a reported hang into a hung nodecert).
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: _exit ends the process at once; nothing after it runs.
        unsafe { libc::_exit(i32::from(code)) }
    }
    std::process::ExitCode::from(code)
}
