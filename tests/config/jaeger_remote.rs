//! Jaeger remote sampling against a real loopback HTTP server (a `TcpListener` in the
//! test) that serves Jaeger's JSON, changes its answer between polls, goes down,
//! answers an error status or garbage, and accepts without ever answering. Every wait
//! is for the poller's callback, with a generous deadline; nothing sleeps and hopes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use opentelemetry::trace::{SpanKind, TraceId};
use opentelemetry_sdk::trace::{SamplingDecision, ShouldSample};
use otel_rate_sampler::{
    ConfigError, ConfigErrorKind, JaegerRemote, JaegerRemotePoller, ManualClock, RemoteUpdate,
    RuleBasedSampler, SamplingConfig,
};

/// How long any one outcome may take to arrive (far above what it takes).
const DEADLINE: Duration = Duration::from_secs(20);

/// What the server answers.
#[derive(Clone)]
enum Answer {
    Json(String),
    Status(u16),
    /// 200 with a body that is not JSON.
    Garbage,
    /// Reads the request and never answers (the connection stays open).
    Hang,
    /// Sends the head and part of the body, then nothing more (the connection stays
    /// open).
    Stall,
}

struct State {
    answer: Answer,
    /// The request targets (path and query) seen, in order.
    requests: Vec<String>,
    /// Asked to stop listening (`down`), and whether it has.
    want_down: bool,
    is_down: bool,
    stop: bool,
}

/// A one-thread HTTP/1.1 server on 127.0.0.1, one request per connection.
struct Server {
    addr: SocketAddr,
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    fn start(answer: Answer) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new((
            Mutex::new(State {
                answer,
                requests: Vec::new(),
                want_down: false,
                is_down: false,
                stop: false,
            }),
            Condvar::new(),
        ));
        let shared = Arc::clone(&state);
        let thread = thread::spawn(move || serve(listener, addr, &shared));
        Self {
            addr,
            state,
            thread: Some(thread),
        }
    }

    fn endpoint(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn answer(&self, answer: Answer) {
        self.state.0.lock().unwrap().answer = answer;
    }

    fn requests(&self) -> Vec<String> {
        self.state.0.lock().unwrap().requests.clone()
    }

    /// Closes the listening socket (connections are then refused) and waits until it is.
    fn down(&self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap().want_down = true;
        // Wakes the accept; the server sees `want_down` and closes the listener.
        let _ = TcpStream::connect(self.addr);
        let guard = lock.lock().unwrap();
        drop(cv.wait_while(guard, |s| !s.is_down).unwrap());
    }

    /// Listens again on the same address, answering `answer`, and waits until it does.
    fn up(&self, answer: Answer) {
        let (lock, cv) = &*self.state;
        let mut state = lock.lock().unwrap();
        state.answer = answer;
        state.want_down = false;
        cv.notify_all();
        drop(cv.wait_while(state, |s| s.is_down).unwrap());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let (lock, cv) = &*self.state;
        lock.lock().unwrap().stop = true;
        cv.notify_all();
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

fn serve(mut listener: TcpListener, addr: SocketAddr, state: &(Mutex<State>, Condvar)) {
    let (lock, cv) = state;
    // Connections left open on purpose (`Hang`), closed when the server stops.
    let mut hung = Vec::new();
    loop {
        let Ok((mut stream, _)) = listener.accept() else {
            continue;
        };
        let mut s = lock.lock().unwrap();
        if s.stop {
            return;
        }
        if s.want_down {
            drop(listener);
            s.is_down = true;
            cv.notify_all();
            s = cv.wait_while(s, |s| s.want_down && !s.stop).unwrap();
            if s.stop {
                return;
            }
            // std sets SO_REUSEADDR: the port can be bound again at once.
            listener = TcpListener::bind(addr).unwrap();
            s.is_down = false;
            cv.notify_all();
            continue;
        }
        let answer = s.answer.clone();
        drop(s);
        let Some(target) = read_request(&mut stream) else {
            continue;
        };
        lock.lock().unwrap().requests.push(target);
        let (status, body) = match answer {
            Answer::Json(body) => (200, body),
            Answer::Status(code) => (code, "{\"error\": \"no\"}".to_owned()),
            Answer::Garbage => (200, "<html>\u{0}\u{1}not json</html>".to_owned()),
            Answer::Hang => {
                hung.push(stream);
                continue;
            }
            Answer::Stall => {
                let head = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"strategyType\"";
                let _ = stream.write_all(head.as_bytes());
                hung.push(stream);
                continue;
            }
        };
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let _ = stream.write_all(head.as_bytes());
        let _ = stream.write_all(body.as_bytes());
    }
}

/// The request target of a GET, once its head is read.
fn read_request(stream: &mut TcpStream) -> Option<String> {
    stream.set_read_timeout(Some(DEADLINE)).ok()?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    let line = String::from_utf8(head).ok()?;
    line.split(' ').nth(1).map(str::to_owned)
}

const RATE_2: &str =
    r#"{"strategyType": "RATE_LIMITING", "rateLimitingSampling": {"maxTracesPerSecond": 2}}"#;
const KEEP_ALL: &str =
    r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 1.0}}"#;

type Outcome = Result<RemoteUpdate, (ConfigErrorKind, String)>;

/// A server answering `answer`; a sampler for `service` whose initial rules keep
/// nothing; its poller of the server's `path` with `settings`, reporting to `rx`.
struct Polled {
    server: Server,
    clock: ManualClock,
    s: RuleBasedSampler<ManualClock>,
    poller: JaegerRemotePoller,
    rx: Receiver<Outcome>,
}

fn polled(
    answer: Answer,
    service: &str,
    path: &str,
    settings: impl FnOnce(JaegerRemote) -> JaegerRemote,
) -> Polled {
    let server = Server::start(answer);
    let clock = ManualClock::new();
    // In the last tenth of every 1 s window (limits are paced, so a window's permits are
    // all released by then, and these tests spend them at one instant).
    clock.set(950_000_000);
    let initial =
        SamplingConfig::from_toml_str("[default]\nprobability = 0.0\n", "initial").unwrap();
    let s = RuleBasedSampler::with_clock(&initial, service, clock.clone()).unwrap();
    let (tx, rx) = mpsc::channel();
    let remote = settings(JaegerRemote::new(server.endpoint(path)));
    let poller = s
        .poll_jaeger_remote(remote, move |outcome: Result<RemoteUpdate, ConfigError>| {
            let _ = tx.send(outcome.map_err(|e| (e.kind(), e.to_string())));
        })
        .unwrap();
    Polled {
        server,
        clock,
        s,
        poller,
        rx,
    }
}

/// A poller for "checkout" of a server answering `body`, with an hour between polls,
/// once its first answer is applied.
fn applied_once(body: &str) -> Polled {
    let t = polled(
        Answer::Json(body.into()),
        "checkout",
        "/api/sampling",
        |r| r.interval(Duration::from_secs(3600)),
    );
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    t
}

/// The next outcome that is not `Unchanged`.
fn next_change(rx: &Receiver<Outcome>) -> Outcome {
    loop {
        match rx
            .recv_timeout(DEADLINE)
            .expect("an outcome before the deadline")
        {
            Ok(RemoteUpdate::Unchanged) => continue,
            other => return other,
        }
    }
}

/// The next error of `kind` whose message has `needle`, skipping the outcomes of polls
/// that were under way before.
fn next_error(rx: &Receiver<Outcome>, kind: ConfigErrorKind, needle: &str) -> String {
    loop {
        if let Err((k, message)) = rx.recv_timeout(DEADLINE).expect("an outcome") {
            if k == kind && message.contains(needle) {
                return message;
            }
        }
    }
}

fn kept(s: &impl ShouldSample, name: &str, n: usize) -> usize {
    (0..n)
        .filter(|i| {
            // Spread over the id space (a Weyl sequence), for probabilities.
            let trace = TraceId::from((*i as u128 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
            s.should_sample(None, trace, name, &SpanKind::Server, &[], &[])
                .decision
                == SamplingDecision::RecordAndSample
        })
        .count()
}

#[test]
fn the_first_poll_comes_at_start_not_after_an_interval() {
    let t = polled(
        Answer::Json(RATE_2.into()),
        "checkout",
        "/api/sampling",
        |r| r.interval(Duration::from_secs(3600)),
    );
    // An hour between polls: only the first one can answer within the deadline.
    assert_eq!(
        t.poller.url(),
        t.server.endpoint("/api/sampling?service=checkout")
    );
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(t.server.requests(), ["/api/sampling?service=checkout"]);
    // 2 traces per second, from the strategy.
    assert_eq!(kept(&t.s, "GET /", 10), 2);
    t.clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&t.s, "GET /", 10), 2);
    assert_eq!(t.s.stats().reloads.succeeded, 1);
}

#[test]
fn agent_style_endpoints_and_numeric_strategy_types_work_too() {
    let body = r#"{"strategyType": 1, "rateLimitingSampling": {"maxTracesPerSecond": 0.5}}"#;
    let t = polled(Answer::Json(body.into()), "my svc", "/sampling", |r| {
        r.interval(Duration::from_secs(3600))
    });
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(t.server.requests(), ["/sampling?service=my%20svc"]);
    // 0.5 per second, honoured: one trace per two seconds, not zero.
    assert_eq!(kept(&t.s, "op", 10), 1);
    t.clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&t.s, "op", 10), 0);
    t.clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&t.s, "op", 10), 1);
}

#[test]
fn changed_answers_are_applied_and_unchanged_operations_keep_their_limiter() {
    let a = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0},
        "operationSampling": {"defaultSamplingProbability": 0,
          "perOperationStrategies": [
            {"operation": "POST /pay", "rateLimitingSampling": {"maxTracesPerSecond": 2}}]}}"#;
    let b = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0},
        "operationSampling": {"defaultSamplingProbability": 0,
          "perOperationStrategies": [
            {"operation": "POST /pay", "rateLimitingSampling": {"maxTracesPerSecond": 2}},
            {"operation": "GET /cart", "probabilisticSampling": {"samplingRate": 1}}]}}"#;
    let c = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0},
        "operationSampling": {"defaultSamplingProbability": 0, "defaultUpperBoundTracesPerSecond": 10,
          "perOperationStrategies": [
            {"operation": "POST /pay", "rateLimitingSampling": {"maxTracesPerSecond": 5}},
            {"operation": "GET /cart", "probabilisticSampling": {"samplingRate": 1}}]}}"#;
    let t = polled(Answer::Json(a.into()), "checkout", "/api/sampling", |r| {
        r.interval(Duration::from_millis(20))
            .jitter(Duration::from_millis(5))
    });
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(kept(&t.s, "POST /pay", 1), 1);
    assert_eq!(kept(&t.s, "GET /cart", 5), 0);

    t.server.answer(Answer::Json(b.into()));
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    // "POST /pay" did not change: the same limiter, one of its two permits spent.
    assert_eq!(kept(&t.s, "POST /pay", 10), 1);
    assert_eq!(kept(&t.s, "GET /cart", 5), 5);
    assert_eq!(kept(&t.s, "GET /other", 5), 0);

    // A raised limit starts with the old count (2 spent of 5), and the upper bound caps
    // the whole service at 10 per second.
    t.server.answer(Answer::Json(c.into()));
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(kept(&t.s, "POST /pay", 10), 3);
    assert_eq!(
        kept(&t.s, "GET /cart", 10),
        7,
        "the cap: 10 less the 3 above"
    );
    t.clock.advance(Duration::from_secs(1));
    assert_eq!(kept(&t.s, "POST /pay", 10), 5);
    assert_eq!(kept(&t.s, "GET /cart", 10), 5);
    let stats = t.s.stats();
    assert_eq!(
        stats.reloads.succeeded, 3,
        "Unchanged answers reload nothing"
    );
    let pay = stats.rule("POST /pay").unwrap();
    assert_eq!(pay.decisions.kept(), 10, "counters carry over by operation");
}

#[test]
fn the_last_good_strategy_stays_while_the_endpoint_is_down_or_answers_garbage() {
    let t = polled(
        Answer::Json(KEEP_ALL.into()),
        "checkout",
        "/api/sampling",
        |r| {
            r.interval(Duration::from_millis(20))
                .timeout(Duration::from_secs(5))
        },
    );
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(kept(&t.s, "op", 5), 5);

    t.server.down();
    next_error(&t.rx, ConfigErrorKind::Io, "");
    assert_eq!(kept(&t.s, "op", 5), 5, "down: the last good strategy stays");

    t.server.up(Answer::Status(503));
    let message = next_error(&t.rx, ConfigErrorKind::Io, "HTTP status 503");
    assert!(message.starts_with(&t.server.endpoint("/api/sampling?service=checkout")));
    assert_eq!(kept(&t.s, "op", 5), 5);

    t.server.answer(Answer::Garbage);
    next_error(
        &t.rx,
        ConfigErrorKind::Syntax,
        "not a Jaeger sampling strategy",
    );
    assert_eq!(kept(&t.s, "op", 5), 5);

    // A valid answer, but over the 1 MiB read limit: refused, not read to the end.
    let huge = format!("{}{KEEP_ALL}", " ".repeat(2 << 20));
    t.server.answer(Answer::Json(huge));
    next_error(&t.rx, ConfigErrorKind::Io, "larger than the limit");
    assert_eq!(kept(&t.s, "op", 5), 5);

    let bad = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 2}}"#;
    t.server.answer(Answer::Json(bad.into()));
    next_error(
        &t.rx,
        ConfigErrorKind::InvalidProbability,
        "probabilisticSampling.samplingRate",
    );
    assert_eq!(kept(&t.s, "op", 5), 5);

    // The same strategy again: nothing to reload.
    t.server.answer(Answer::Json(KEEP_ALL.into()));
    loop {
        match t.rx.recv_timeout(DEADLINE).unwrap() {
            Ok(update) => break assert_eq!(update, RemoteUpdate::Unchanged),
            Err(_) => continue, // a bad answer's poll already under way
        }
    }
    let keep_none = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {}}"#;
    t.server.answer(Answer::Json(keep_none.into()));
    assert_eq!(next_change(&t.rx), Ok(RemoteUpdate::Applied));
    assert_eq!(kept(&t.s, "op", 5), 0);
    // Two strategies applied; each failed poll (at least the five waited for) counted.
    let reloads = t.s.stats().reloads;
    assert_eq!(reloads.succeeded, 2);
    assert!(reloads.failed >= 5, "{reloads:?}");
}

#[test]
fn an_endpoint_that_never_answers_or_stalls_midway_times_out_and_the_initial_sampler_stays() {
    for answer in [Answer::Hang, Answer::Stall] {
        let t = polled(answer, "checkout", "/api/sampling", |r| {
            r.interval(Duration::from_secs(3600))
                .timeout(Duration::from_millis(200))
        });
        // Decisions go on while the request hangs.
        assert_eq!(kept(&t.s, "op", 5), 0);
        next_error(&t.rx, ConfigErrorKind::Io, "time limit of 200ms");
        assert_eq!(kept(&t.s, "op", 5), 0, "no answer yet: the initial sampler");
    }
}

#[test]
fn dropping_the_poller_stops_its_thread() {
    let t = polled(
        Answer::Json(KEEP_ALL.into()),
        "checkout",
        "/api/sampling",
        |r| r.interval(Duration::from_millis(5)),
    );

    for _ in 0..3 {
        t.rx.recv_timeout(DEADLINE).unwrap().unwrap();
    }
    drop(t.poller);
    // The callback (holding the sender) goes with the thread: the channel disconnects.
    loop {
        match t.rx.recv_timeout(DEADLINE) {
            Ok(_) => continue, // a poll under way when the handle was dropped
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => panic!("the polling thread is still running"),
        }
    }
    let polls = t.server.requests().len();
    assert!(polls >= 3);
    // The sampler keeps the last strategy and works on.
    assert_eq!(kept(&t.s, "op", 5), 5);
}

#[test]
fn the_example_answer_gives_per_operation_rules_under_the_upper_bound() {
    let t = applied_once(include_str!("../../examples/jaeger-remote/response.json"));
    let names: Vec<String> = t.s.stats().rules.iter().map(|r| r.name.clone()).collect();
    assert_eq!(
        names,
        ["POST /api/pay", "GET /health", "GET /api/cart", "default"]
    );
    // 2.5 per second is 3 per 1.2 s.
    assert_eq!(kept(&t.s, "POST /api/pay", 10), 3);
    assert_eq!(kept(&t.s, "GET /health", 10), 0);
    // A quarter of 400 is more than the upper bound (50 per second) leaves.
    assert_eq!(kept(&t.s, "GET /api/cart", 400), 47);
    t.clock.advance(Duration::from_secs(2));
    // Deterministic (the ids are fixed): a quarter of them, give or take.
    let cart = kept(&t.s, "GET /api/cart", 100);
    assert!((15..=35).contains(&cart), "a quarter, by trace id: {cart}");
}

#[test]
fn the_lower_bound_keeps_its_traces_per_second_for_an_operation_at_probability_zero() {
    use otel_rate_sampler::attributes::{LOWERBOUND, SAMPLER_TYPE};
    let body = r#"{"strategyType": "PROBABILISTIC", "probabilisticSampling": {"samplingRate": 0},
        "operationSampling": {"defaultSamplingProbability": 0, "defaultLowerBoundTracesPerSecond": 2,
          "perOperationStrategies": [
            {"operation": "GET /health", "probabilisticSampling": {"samplingRate": 0}},
            {"operation": "GET /cart", "probabilisticSampling": {"samplingRate": 0}}]}}"#;
    let t = applied_once(body);
    // Each listed operation keeps 2 per second of its own; the operations not listed
    // share the default's 2.
    for second in 0..5 {
        assert_eq!(kept(&t.s, "GET /health", 100), 2, "second {second}");
        assert_eq!(kept(&t.s, "GET /cart", 100), 2, "second {second}");
        assert_eq!(
            kept(&t.s, "GET /a", 100) + kept(&t.s, "GET /b", 100),
            2,
            "second {second}"
        );
        t.clock.advance(Duration::from_secs(1));
    }
    // Kept by the lower bound, not by a probability: no `th`, `sampler.type = lowerbound`.
    let result = t.s.should_sample(
        None,
        TraceId::from(7u128),
        "GET /health",
        &SpanKind::Server,
        &[],
        &[],
    );
    assert_eq!(result.decision, SamplingDecision::RecordAndSample);
    assert!(result
        .attributes
        .iter()
        .any(|kv| kv.key.as_str() == SAMPLER_TYPE && kv.value.as_str() == LOWERBOUND));
    assert!(result.trace_state.get("ot").is_none());
    let health = t.s.stats();
    let health = health.rule("GET /health").unwrap();
    assert_eq!(
        (health.decisions.total(), health.decisions.kept()),
        (501, 11)
    );
}
