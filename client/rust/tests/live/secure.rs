//! TLS, mutual TLS and bearer tokens against a server that requires all three (the harness
//! starts it: PARSETIER_SECURE_*).

use std::path::Path;

use parsetier_client::{Client, Code, Finish, OpenOptions, Tls};

use crate::common::env;

fn dial(with_certificate: bool, token: Option<&str>) -> Client {
    let ca = env("PARSETIER_SECURE_CA");
    let (cert, key) = (env("PARSETIER_SECURE_CLIENT_CERT"), env("PARSETIER_SECURE_CLIENT_KEY"));
    let tls = if with_certificate {
        Tls::from_files(Some(Path::new(&ca)), Some(Path::new(&cert)), Some(Path::new(&key)))
    } else {
        Tls::from_files(Some(Path::new(&ca)), None, None)
    };
    let mut builder = Client::builder(env("PARSETIER_SECURE_SERVER")).tls(tls.expect("TLS files"));
    if let Some(token) = token {
        builder = builder.token(token);
    }
    builder.build().expect("client")
}

#[tokio::test]
#[ignore = "live: needs a mutual-TLS server, PARSETIER_SECURE_* (tests/test_rust_client.py starts one)"]
async fn secure_mutual_tls_and_token() {
    let client = dial(true, Some(&env("PARSETIER_SECURE_TOKEN")));
    let (final_message, _) = client
        .parse_stream(OpenOptions::new("qwen3"), vec![vec![9707], vec![0]], Finish::stop())
        .await
        .expect("stream");
    assert_eq!(final_message.message.map(|m| m.content).as_deref(), Some("Hello!"));
    let once = client.parse_once(OpenOptions::new("qwen3"), vec![9707, 0], Finish::stop()).await.expect("parse_once");
    assert_eq!(once.r#final.and_then(|f| f.message).map(|m| m.content).as_deref(), Some("Hello!"));
}

#[tokio::test]
#[ignore = "live: needs a mutual-TLS server, PARSETIER_SECURE_* (tests/test_rust_client.py starts one)"]
async fn secure_missing_or_wrong_token_is_unauthenticated() {
    let error = dial(true, None).list_models().await.expect_err("no token");
    assert_eq!(error.code(), Code::Unauthenticated, "{error}");
    let error = dial(true, None).open(OpenOptions::new("qwen3")).await.err().expect("open without a token");
    assert_eq!(error.code(), Code::Unauthenticated, "{error}");
    let error = dial(true, Some("not-the-token")).list_models().await.expect_err("wrong token");
    assert_eq!(error.code(), Code::Unauthenticated, "{error}");
}

#[tokio::test]
#[ignore = "live: needs a mutual-TLS server, PARSETIER_SECURE_* (tests/test_rust_client.py starts one)"]
async fn secure_no_client_certificate_is_refused() {
    let error = dial(false, Some(&env("PARSETIER_SECURE_TOKEN"))).list_models().await.expect_err("no certificate");
    assert_eq!(error.code(), Code::Unavailable, "{error}");
}

#[tokio::test]
#[ignore = "live: needs a mutual-TLS server, PARSETIER_SECURE_* (tests/test_rust_client.py starts one)"]
async fn secure_tls_file_errors() {
    let (ca, cert, key) =
        (env("PARSETIER_SECURE_CA"), env("PARSETIER_SECURE_CLIENT_CERT"), env("PARSETIER_SECURE_CLIENT_KEY"));
    assert!(
        Tls::from_files(Some(Path::new(&ca)), Some(Path::new(&cert)), None).is_err(),
        "a certificate without its key"
    );
    assert!(Tls::from_files(Some(Path::new(&key)), None, None).is_err(), "a key file as a CA bundle");
    assert!(Tls::from_files(Some(Path::new("/nonexistent/ca.pem")), None, None).is_err(), "a missing file");
}
