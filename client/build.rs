//! Compiles the contract (`../proto`) with protox (pure Rust: no protoc on a fresh machine).
//! With the `server` feature it also generates the server stubs and writes the descriptor set
//! that server reflection serves.
use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../proto");
    let fds = protox::compile(["ledger/v1/ledger.proto"], ["../proto"])?;
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    if server {
        let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
        std::fs::write(out.join("ledger_descriptor.bin"), fds.encode_to_vec())?;
    }
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(server)
        .compile_fds(fds)?;
    Ok(())
}
