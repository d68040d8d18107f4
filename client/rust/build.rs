//! Generates the parsetier.v1 messages and the ParserService client from protos/ (the contract),
//! with Debian's protoc (or $PROTOC), so the crate never carries generated code that can go stale.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../protos");
    let file = protos.join("parsetier/v1/parsetier.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    tonic_prost_build::configure().build_server(false).compile_protos(&[file], &[protos])?;
    Ok(())
}
