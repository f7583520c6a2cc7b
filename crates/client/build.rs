//! Compiles the contract (`../../proto`) with protox (pure Rust: no protoc on a fresh machine).
//! With the `server` feature it also generates the server stubs and writes the descriptor set
//! that server reflection serves. `google/rpc/status.proto` is googleapis' file, vendored
//! under `../../proto/google` (buf and protox resolve it offline).
use heck::ToUpperCamelCase;
use prost::Message;

/// The contract's `enum ErrorReason`.
const REASONS_FILE: &str = "ledger/v1/error_reason.proto";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../../proto");
    // error_reason.proto is imported by no message (ErrorInfo.reason is a string), so it is
    // named here: its enum is `pb::ErrorReason` (the client's `Reason`) and reflection
    // serves it.
    let fds = protox::compile(["ledger/v1/ledger.proto", REASONS_FILE], ["../../proto"])?;
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out.join("error_reason_all.rs"), reasons_all(&fds)?)?;
    let server = std::env::var_os("CARGO_FEATURE_SERVER").is_some();
    if server {
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

/// `ErrorReason::ALL`: every value of the proto's enum but the zero one, in its order, by the
/// names prost gives the variants (prost has no list of an enum's values).
fn reasons_all(
    fds: &protox::prost_reflect::prost_types::FileDescriptorSet,
) -> Result<String, String> {
    let reasons = fds
        .file
        .iter()
        .filter(|f| f.name() == REASONS_FILE)
        .flat_map(|f| &f.enum_type)
        .find(|e| e.name() == "ErrorReason")
        .ok_or_else(|| format!("{REASONS_FILE} has no enum ErrorReason"))?;
    let variants: String = reasons
        .value
        .iter()
        .filter(|v| v.number() != 0)
        .map(|v| format!("    Self::{},\n", v.name().to_upper_camel_case()))
        .collect();
    Ok(format!(
        "impl crate::pb::ErrorReason {{\n\
         /// Every reason this client knows (the proto's values but `Unspecified`), in the\n\
         /// proto's order.\n\
         pub const ALL: &'static [Self] = &[\n{variants}];\n}}\n"
    ))
}
