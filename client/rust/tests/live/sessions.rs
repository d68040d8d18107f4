//! Sessions, the unary calls, options, errors and keepalive.

use std::time::Duration;

use parsetier_client::{pb, Client, Code, Error, Finish, Keepalive, OpenOptions};

use crate::common::*;

fn weather() -> OpenOptions {
    OpenOptions::new("qwen3").tools_json(WEATHER_TOOLS)
}

/// Streams QWEN3_OUTPUT through a session, `per_message` steps to a message, receiving in
/// another task as a serving stack would; returns every reply.
async fn run_session(client: &Client, per_message: usize) -> Vec<pb::ParseResponse> {
    let session = client.open(weather().request_id("rust-client-test")).await.expect("open");
    let (sender, mut replies) = session.split();
    let receiver = tokio::spawn(async move {
        let mut all = Vec::new();
        while let Some(reply) = replies.recv().await {
            all.push(reply.expect("reply"));
        }
        (all, replies.final_message().cloned())
    });
    let steps = one_per_step(&QWEN3_OUTPUT);
    for chunk in steps.chunks(per_message) {
        sender.send(chunk.to_vec()).await.expect("send");
    }
    sender.finish(stop_at_im_end()).await.expect("finish");
    let (replies, final_message) = receiver.await.expect("receiver");
    // The contract: sequence counts 1, 2, 3...; only the last reply carries final;
    // client_messages never decreases and, on the last reply, counts every message sent.
    let want_client_messages = (1 + steps.len().div_ceil(per_message) + 1) as u64;
    let mut last = 0;
    for (i, reply) in replies.iter().enumerate() {
        assert_eq!(reply.sequence, i as u64 + 1);
        assert!(reply.client_messages >= last);
        last = reply.client_messages;
        assert_eq!(reply.r#final.is_some(), i == replies.len() - 1, "final on reply {i}");
    }
    assert_eq!(last, want_client_messages);
    assert_eq!(final_message.as_ref(), replies.last().and_then(|r| r.r#final.as_ref()));
    replies
}

fn deltas_of(replies: &[pb::ParseResponse]) -> Vec<pb::Delta> {
    replies.iter().flat_map(|r| r.deltas.iter().cloned()).collect()
}

#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn list_models_has_qwen3() {
    let models = client().list_models().await.expect("list_models");
    let qwen3 = models.iter().find(|m| m.name == "qwen3").expect("qwen3 listed");
    assert!(qwen3.tokenizer_available && qwen3.format == "qwen3", "{qwen3:?}");
    let capabilities = qwen3.capabilities.as_ref().expect("capabilities");
    assert!(capabilities.reasoning && capabilities.tool_calls);
    let names: Vec<_> = models.iter().map(|m| m.name.clone()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "models sorted by name");
}

/// One token per message, as a decode loop sends them: the deltas stream (several fragments
/// for a call's arguments) and join to exactly the final message.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn session_one_token_per_message() {
    let replies = run_session(&client(), 1).await;
    let final_message = replies.last().and_then(|r| r.r#final.clone()).expect("final");
    check_final(&final_message);
    let deltas = deltas_of(&replies);
    assert_eq!(Some(join_deltas(&deltas)), final_message.message);
    assert!(replies.len() >= 10 && replies.len() <= QWEN3_OUTPUT.len() + 1, "{} replies", replies.len());
    let fragments = deltas.iter().flat_map(|d| &d.tool_calls).filter(|f| f.index == 0).count();
    assert!(fragments >= 2, "call 0 in {fragments} fragment(s)");
}

/// Batching steps changes how many messages travel, never the result.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn session_several_steps_per_message() {
    let client = client();
    let one = without_ids(&join_deltas(&deltas_of(&run_session(&client, 1).await)));
    for per_message in [2, 5, QWEN3_OUTPUT.len()] {
        let replies = run_session(&client, per_message).await;
        check_final(replies.last().and_then(|r| r.r#final.as_ref()).expect("final"));
        assert_eq!(without_ids(&join_deltas(&deltas_of(&replies))), one, "{per_message} steps per message");
    }
}

/// The one-call stream and the unary call agree with each other and with the expected parse.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn parse_stream_equals_parse_once() {
    let client = client();
    let (final_message, deltas) =
        client.parse_stream(weather(), one_per_step(&QWEN3_OUTPUT), stop_at_im_end()).await.expect("parse_stream");
    check_final(&final_message);
    assert_eq!(Some(join_deltas(&deltas)), final_message.message);
    let once = client.parse_once(weather(), QWEN3_OUTPUT.to_vec(), stop_at_im_end()).await.expect("parse_once");
    assert!(once.deltas.is_empty(), "deltas without being asked");
    let once_final = once.r#final.expect("final");
    check_final(&once_final);
    assert_eq!(once_final.usage, final_message.usage);
    assert_eq!(once_final.finish_reason, final_message.finish_reason);
}

/// The deltas stream yields every delta in order and holds the final once it ends.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn deltas_stream() {
    let session = client().open(weather()).await.expect("open");
    send_output(&session).await;
    let (_, replies) = session.split();
    let mut deltas = replies.deltas();
    let mut all = Vec::new();
    while let Some(delta) = deltas.recv().await {
        all.push(delta.expect("delta"));
    }
    let final_message = deltas.final_message().expect("final").clone();
    check_final(&final_message);
    assert_eq!(Some(join_deltas(&all)), final_message.message);
}

fn assert_code<T: std::fmt::Debug>(what: &str, result: Result<T, Error>, code: Code) -> Error {
    match result {
        Err(error) => {
            assert_eq!(error.code(), code, "{what}: {error}");
            error
        }
        Ok(value) => panic!("{what}: {value:?}, want {code:?}"),
    }
}

/// Errors carry the server's gRPC status, where they are caused.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn errors_carry_the_status() {
    let client = client();
    const OUT_OF_VOCABULARY: u32 = 10_000_000;
    assert_code("open unknown model", client.open(OpenOptions::new("no-such-model")).await.map(|_| ()), Code::NotFound);
    let result = client.parse_stream(OpenOptions::new("no-such-model"), one_per_step(&QWEN3_OUTPUT), Finish::stop());
    assert_code("parse_stream unknown model", result.await.map(|_| ()), Code::NotFound);
    let result = client.parse_once(OpenOptions::new("no-such-model"), QWEN3_OUTPUT.to_vec(), Finish::stop());
    let error = assert_code("parse_once unknown model", result.await, Code::NotFound);
    assert!(error.status().is_some(), "the server's status is kept");

    let mut session = client.open(OpenOptions::new("qwen3")).await.expect("open");
    session.send([QWEN3_OUTPUT[..3].to_vec(), vec![OUT_OF_VOCABULARY]]).await.expect("send");
    let mut last = None;
    while let Some(reply) = session.recv().await {
        if let Err(error) = reply {
            last = Some(error); // deltas of the valid ids may come first
        }
    }
    let error = last.expect("an error");
    assert_eq!(error.code(), Code::InvalidArgument, "{error}");
    assert!(error.message().contains("10000000"), "{error}");
    // The session has ended: sending more says so.
    let error = session.send([[9707u32]]).await.expect_err("send after the end");
    assert_eq!(error.code(), Code::FailedPrecondition);

    let mut steps = one_per_step(&QWEN3_OUTPUT[..5]);
    steps.push(vec![OUT_OF_VOCABULARY]);
    let result = client.parse_stream(OpenOptions::new("qwen3"), steps, Finish::stop());
    assert_code("parse_stream out-of-vocabulary id", result.await.map(|_| ()), Code::InvalidArgument);
    let result = client.parse_once(OpenOptions::new("qwen3"), vec![OUT_OF_VOCABULARY], Finish::stop());
    assert_code("parse_once out-of-vocabulary id", result.await, Code::InvalidArgument);
}

/// The options reach the server: tool_choice in its three shapes, output kinds, stop strings.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn options_reach_the_server() {
    let client = client();
    let none = client
        .parse_once(
            weather().tool_choice("none").output(pb::OutputKind::Deltas),
            QWEN3_OUTPUT.to_vec(),
            Finish::stop_string("Observation:"),
        )
        .await
        .expect("tool_choice none");
    let final_message = none.r#final.expect("final");
    assert!(final_message.message.as_ref().expect("message").tool_calls.is_empty());
    assert_eq!(final_message.finish_reason, pb::FinishReason::Stop as i32);
    assert!(!none.deltas.is_empty(), "output(DELTAS) gave no deltas");
    assert_eq!(Some(join_deltas(&none.deltas)), final_message.message);

    let named = client
        .parse_once(weather().tool_choice("get_weather"), QWEN3_OUTPUT.to_vec(), stop_at_im_end())
        .await
        .expect("named tool_choice");
    let final_message = named.r#final.expect("final");
    assert_eq!(final_message.finish_reason, pb::FinishReason::Stop as i32, "a forced function stays STOP");
    assert_eq!(without_ids(final_message.message.as_ref().expect("message")), want_message());

    let events = client
        .parse_once(weather().output(pb::OutputKind::Events), QWEN3_OUTPUT.to_vec(), stop_at_im_end())
        .await
        .expect("events");
    let kinds: Vec<_> = events.events.iter().map(|e| e.kind).collect();
    assert_eq!(kinds.first(), Some(&(pb::EventKind::ReasoningStart as i32)));
    assert_eq!(kinds.last(), Some(&(pb::EventKind::End as i32)));
    assert_eq!(kinds.iter().filter(|&&k| k == pb::EventKind::ToolCallStart as i32).count(), 2);

    let result = client.open(OpenOptions::new("qwen3").tool_choice("required")).await;
    assert_code("tool_choice required without tools", result.map(|_| ()), Code::InvalidArgument);
}

/// The constraint arrives in both forms, and bad options get their codes.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn build_constraint() {
    let client = client();
    let constraint =
        client.build_constraint(weather().tool_choice("required").thinking(false)).await.expect("build_constraint");
    let tag = &constraint.structural_tag_json;
    assert!(tag.contains(r#""type": "structural_tag""#) || tag.contains(r#""type":"structural_tag""#), "{tag}");
    assert!(tag.contains(r#""at_least_one": true"#) || tag.contains(r#""at_least_one":true"#), "{tag}");
    assert_eq!(constraint.triggers, vec!["<tool_call>".to_string()]);
    assert_eq!(constraint.reasoning, pb::ConstraintReasoning::None as i32);
    assert!(constraint.lark_grammar.contains("get_weather"));

    assert_code("unknown model", client.build_constraint(OpenOptions::new("no-such-model")).await, Code::NotFound);
    let result = client.build_constraint(weather().tool_choice("send_mail")).await;
    assert_code("tool_choice naming no tool", result, Code::InvalidArgument);
    let xlam = OpenOptions::new("xlam-2-qwen").tools_json(WEATHER_TOOLS).parallel_tool_calls(false);
    assert_code("a format it cannot derive", client.build_constraint(xlam).await, Code::FailedPrecondition);
}

/// Completion sessions: plain text, stop strings cut at finish, choices of one request.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn completion_sessions() {
    let client = client();
    let content = |deltas: &[pb::Delta]| deltas.iter().map(|d| d.content.as_str()).collect::<String>();
    let hello = [9707u32, 220, 108386]; // "Hello 你好"

    // EOS with no finish reason nor stop id: its text was held back, and is dropped.
    let steps = vec![hello[..2].to_vec(), hello[2..].to_vec(), vec![IM_END]];
    let (final_message, deltas) = client
        .parse_stream(OpenOptions::new("qwen3").completion(false), steps, Finish::stop())
        .await
        .expect("completion");
    assert_eq!(content(&deltas), "Hello 你好");
    assert_eq!(final_message.message.expect("message").content, "Hello 你好");

    // No format in a completion: <think> is plain text.
    let steps = vec![vec![151667], hello.to_vec()];
    let (_, deltas) =
        client.parse_stream(OpenOptions::new("qwen3").completion(true), steps, Finish::length()).await.expect("marker");
    assert_eq!(content(&deltas), "<think>Hello 你好");

    // A listed stop string is never streamed, and Finish cuts the text at it.
    let steps = vec![vec![603], vec![1378], vec![11176], vec![2326]]; // "one", " two", " END", " three"
    let options = OpenOptions::new("qwen3").completion(true).stop(vec!["END".into()], vec![]);
    let (_, deltas) = client.parse_stream(options, steps, Finish::stop_string("END")).await.expect("stop string");
    assert_eq!(content(&deltas), "one two ");

    // n > 1: the choices of one request get different tool call ids, each stable.
    let call_id = |choice: u32| {
        let client = client.clone();
        async move {
            let options = weather().request_id("rust-choices").choice(choice);
            let (final_message, _) =
                client.parse_stream(options, vec![QWEN3_OUTPUT.to_vec()], Finish::stop()).await.expect("choice");
            final_message.message.expect("message").tool_calls[0].id.clone()
        }
    };
    let (first, second) = (call_id(0).await, call_id(1).await);
    assert_ne!(first, second);
    assert_eq!(call_id(1).await, second);
}

/// Transport security is the caller's choice: no choice, no client.
#[tokio::test]
async fn builder_needs_credentials() {
    let error = Client::builder("127.0.0.1:1").build().err().expect("no credentials");
    assert!(matches!(error, Error::Config(_)), "{error}");
    assert!(Client::builder("127.0.0.1:1").tls(parsetier_client::Tls::system_roots()).build().is_ok());
}

/// The default keepalive stays within the server's ping policy (a ping at most every 5 min
/// without data, none without calls), and a session through it survives a quiet spell in which
/// a client pinging every second is closed with GOAWAY too_many_pings.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn keepalive_defaults_within_server_policy() {
    let keepalive = Keepalive::default();
    assert!(keepalive.interval >= Duration::from_secs(300) && !keepalive.while_idle, "{keepalive:?}");
    assert!(keepalive.timeout > Duration::ZERO && keepalive.timeout <= Duration::from_secs(60));

    let quiet = |keepalive: Keepalive| async move {
        let client =
            Client::builder(env("PARSETIER_SERVER")).insecure().keepalive(keepalive).without_resume().build()?;
        let mut session = client.open(OpenOptions::new("qwen3")).await?;
        session.send([[9707u32]]).await?;
        session.recv().await.expect("a reply")?;
        tokio::time::sleep(Duration::from_secs(6)).await;
        // A session the server closed meanwhile says why in its replies, not here.
        let _ = session.send([[9707u32]]).await;
        let _ = session.finish(Finish::stop()).await;
        while let Some(reply) = session.recv().await {
            reply?;
        }
        Ok::<_, Error>(session.final_message().is_some())
    };
    let eager = Keepalive { interval: Duration::from_secs(1), timeout: Duration::from_secs(5), while_idle: true };
    let (defaults, pinger) = tokio::join!(quiet(Keepalive::default()), quiet(eager));
    assert!(defaults.expect("the default keepalive's quiet session"), "no final reply");
    let error = pinger.expect_err("a client pinging every second is closed by the server");
    assert_eq!(error.code(), Code::Unavailable, "{error}");
}

/// Dropping a session before its end cancels it; the server frees it.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn dropping_a_session_cancels_it() {
    let client = client();
    let session = client.open(weather()).await.expect("open");
    session.send([QWEN3_OUTPUT[..3].to_vec()]).await.expect("send");
    drop(session);
    // The connection is still fine for the next session.
    let (final_message, _) =
        client.parse_stream(weather(), vec![QWEN3_OUTPUT.to_vec()], stop_at_im_end()).await.expect("next session");
    check_final(&final_message);
}

/// `OpenOptions::wire`: each reply's bytes, then the final's, are the API's own stream or body.
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn wire_bytes_to_forward() {
    let client = client();
    let chat = pb::WireOptions { model: "served".into(), include_usage: true, ..streamed_chat("chatcmpl-rust") };
    let session = client.open(weather().output(pb::OutputKind::FinalOnly).wire(chat.clone())).await.expect("open");
    send_output(&session).await;
    let (_, replies) = session.split();
    let mut pieces = replies.wire();
    let mut wire = Vec::new();
    while let Some(piece) = pieces.recv().await {
        let piece = piece.expect("piece");
        assert!(!piece.is_empty());
        wire.extend_from_slice(&piece);
    }
    check_final(pieces.final_message().expect("final"));
    let wire = String::from_utf8(wire).expect("UTF-8");
    assert!(wire.starts_with(r#"data: {"id":"chatcmpl-rust","object":"chat.completion.chunk""#), "{wire}");
    assert!(wire.contains(r#""finish_reason":"tool_calls""#) && wire.ends_with("data: [DONE]\n\n"), "{wire}");

    let messages = pb::WireOptions { dialect: pb::WireDialect::AnthropicMessages as i32, stream: false, ..chat };
    let once =
        client.parse_once(weather().wire(messages), QWEN3_OUTPUT.to_vec(), stop_at_im_end()).await.expect("parse_once");
    let body = String::from_utf8(once.r#final.expect("final").wire).expect("UTF-8");
    assert!(body.starts_with(r#"{"id":"chatcmpl-rust","type":"message""#), "{body}");
    assert!(body.contains(r#""stop_reason":"tool_use""#), "{body}");
}

/// A session that reaches no server retries within the policy's budget, then surfaces
/// `Unavailable`; a list of addresses is used in order, so the second one serves when the first
/// is gone (pick_first).
#[tokio::test]
#[ignore = "live: needs a parsetier server at PARSETIER_SERVER (tests/test_rust_client.py starts one)"]
async fn unreachable_open_spends_the_budget_and_addresses_are_used_in_order() {
    use parsetier_client::ResumePolicy;
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").to_string() // closed once the listener drops
    };
    let policy = ResumePolicy {
        attempts: 3,
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(20),
    };
    let client = Client::builder(closed.as_str()).insecure().resume(policy).build().expect("client");
    let started = std::time::Instant::now();
    let error = client.open(OpenOptions::new("qwen3")).await.err().expect("no server");
    assert_eq!(error.code(), Code::Unavailable, "{error}");
    assert!(started.elapsed() < Duration::from_secs(10), "the budget bounds the retries");

    let target = format!("ipv4:{closed},{}", env("PARSETIER_SERVER"));
    let client = Client::builder(target).insecure().resume(policy).build().expect("client");
    let (final_message, _) = client
        .parse_stream(weather(), vec![QWEN3_OUTPUT.to_vec()], stop_at_im_end())
        .await
        .expect("the second address");
    check_final(&final_message);
}
