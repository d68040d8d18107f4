//! Generates the parsetier.v1 messages and the ParserService client from the crate's contract
//! (`proto/`: in the repository a link to `protos/`, in the packaged crate the file), compiled by protox (a protobuf compiler written in Rust): the crate builds
//! outside the repository and without `protoc`, and never carries generated code that can go stale.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The crate's folder as cargo gives it when the script runs, not as it was when the script
    // was compiled: a target directory copied from another checkout reuses the compiled script.
    let protos = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let file = protos.join("parsetier/v1/parsetier.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&protos])?;
    tonic_prost_build::configure().build_server(false).compile_fds(descriptors)?;
    Ok(())
}
