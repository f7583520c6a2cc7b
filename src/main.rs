//! `ledger`: the command line. Thin: parses arguments and calls into the library.

fn main() -> std::process::ExitCode {
    ledger::cli::main()
}
