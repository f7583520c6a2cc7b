//! `ledger`: the command line. Thin: parses arguments and calls into the library.

/// mimalloc instead of the system allocator: gRPC handling allocates and frees many small
/// buffers per request, and glibc's malloc spent a quarter of the server's CPU on them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    ledger::cli::main()
}
