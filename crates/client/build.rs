//! Compiles the contract (`../../proto`) with protox (pure Rust: no protoc on a fresh machine).
//! With the `server` feature it also generates the server stubs and writes the descriptor set
//! that server reflection serves. `google/rpc/status.proto` is googleapis' file, vendored
//! under `../../proto/google` (buf and protox resolve it offline).
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto");
    // error_reason.proto is imported by no message (ErrorInfo.reason is a string), so it is
    // named here: its enum is `pb::ErrorReason` and reflection serves it.
    let fds = protox::compile(
        ["ledger/v1/ledger.proto", "ledger/v1/error_reason.proto"],
        ["../../proto"],
    )?;
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    if server {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
        std::fs::write(out.join("ledger_descriptor.bin"), fds.encode_to_vec())?;
    }
    // google.rpc.Status (PostBatch's per-request errors) is tonic-types' own type, the one
    // `tonic_types::StatusExt` reads ErrorInfo from; it is not generated again here.
    tonic_prost_build::configure()
        .extern_path(".google.rpc", "::tonic_types::pb")
        .build_client(true)
        .build_server(server)
        .compile_fds(fds)?;
    Ok(())
}
