//! When does a real vLLM send the chat role chunk (issue 19, item 5)? vLLM 0.32's V1 scheduler
//! sends `{"role": "assistant", "content": ""}` together with the first token, after prefill;
//! the simulator follows it (`--early-role-chunk` keeps the old at-admission timing for tests of
//! clients that must not time a role chunk). This test streams one chat request with a long
//! prompt (so prefill takes a measurable time) through its own socket, timestamps every `data:`
//! line as its read arrives, and checks that the role chunk came with the first token chunk,
//! not a prefill earlier. servebench's TTFT never times a role chunk either way (a role-only
//! chunk is not a token event, `servebench_sse::decode`; the simulator tests
//! `ttft_is_prefill_plus_one_step` pin that with the early timing).

use super::*;

/// One streamed chat request: (arrival after the request was written, payload) per `data:`
/// line, in order.
fn stream_events(env: &E2eEnv, prompt: &str) -> Vec<(Duration, String)> {
    let rest = env.url.strip_prefix("http://").expect("an http:// URL");
    let (hostport, base_path) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let sock = hostport
        .to_socket_addrs()
        .expect("engine address")
        .next()
        .expect("an address");
    let mut s = TcpStream::connect_timeout(&sock, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = serde_json::json!({
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        "stream": true,
        "ignore_eos": true,
    })
    .to_string();
    let req = format!(
        "POST {base_path}/v1/chat/completions HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).expect("write the request");
    let t0 = Instant::now();
    let mut events = Vec::new();
    let mut raw = Vec::new();
    let mut pending = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) => panic!("reading the stream: {e}"),
        };
        let at = t0.elapsed();
        if raw.len() < 4096 {
            raw.extend_from_slice(&buf[..n.min(4096 - raw.len())]);
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(i) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line).trim().to_string();
            if let Some(p) = line.strip_prefix("data: ") {
                events.push((at, p.to_string()));
            }
        }
    }
    // an error answer (a 400 for a prompt over the context, say) has no `data:` line: show it
    assert!(
        !events.is_empty(),
        "no SSE event in the answer; it began {:?}",
        String::from_utf8_lossy(&raw)
    );
    events
}

#[test]
#[ignore = "needs a running vLLM engine (SERVEBENCH_E2E_URL, SERVEBENCH_E2E_ENGINE=vllm)"]
fn the_role_chunk_comes_with_the_first_token_on_vllm() {
    let env = E2eEnv::from_env();
    if env.engine != Engine::Vllm {
        eprintln!("SKIPPED: the role-chunk timing check is for vLLM");
        return;
    }
    // words of the tiny model's tokenizer corpus (scripts/engines/make-tiny-model.py), about one
    // token each: ~800 prompt tokens of the 2,048-token context (words outside the corpus split
    // into several byte-level tokens each and overflow it: vLLM then answers 400, no stream).
    // A prefill of tens of ms on the CPU engine, far above a decode step
    let prompt = "the server streams each token of the prompt to the model ".repeat(72);
    let mut seen = Vec::new();
    for attempt in 0..3 {
        let events = stream_events(&env, &prompt);
        let role = events
            .iter()
            .position(|(_, p)| p.contains("\"role\""))
            .unwrap_or_else(|| panic!("no role chunk in {events:?}"));
        // the first chunk after the role chunk that carries a choice: the first token's (the
        // random model's tokens may decode to "")
        let first = events[role + 1..]
            .iter()
            .position(|(_, p)| p.contains("\"delta\"") && !p.contains("\"role\""))
            .map(|i| role + 1 + i)
            .unwrap_or_else(|| panic!("no token chunk after the role chunk: {events:?}"));
        let (t_role, t_first) = (events[role].0, events[first].0);
        let gap = t_first.saturating_sub(t_role);
        // next chunks: a decode step each
        let steps: Vec<Duration> = events[first..]
            .windows(2)
            .filter(|w| w[1].1.contains("\"delta\""))
            .map(|w| w[1].0.saturating_sub(w[0].0))
            .collect();
        eprintln!(
            "attempt {attempt}: role chunk at {t_role:?}, first token chunk at {t_first:?} (gap {gap:?}), later chunk gaps {steps:?}"
        );
        // together: the gap is far below the time the request took to its first token (the
        // prefill), which an at-admission role chunk would show
        if gap <= Duration::from_millis(5).max(t_first / 5) {
            return;
        }
        seen.push((t_role, t_first));
    }
    panic!(
        "vLLM sent the role chunk well before the first token in 3 of 3 requests (role, first token): {seen:?}; \
         the simulator's default (role chunk with the first token) no longer matches it"
    );
}
