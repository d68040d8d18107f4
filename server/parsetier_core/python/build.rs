//! Generates the parsetier.v1 messages (prost) from the contract in the crate's `proto/` (links to
//! the repository's `protos/`),
//! compiled by protox (a protobuf compiler written in Rust): the core builds wherever `pip install`
//! builds it, with no `protoc`, and never carries generated code that can go stale.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("proto");
    let file = protos.join("parsetier/v1/parsetier.proto");
    println!("cargo:rerun-if-changed={}", file.display());
    let descriptors = protox::compile([&file], [&protos])?;
    prost_build::Config::new().compile_fds(descriptors)?;
    Ok(())
}
