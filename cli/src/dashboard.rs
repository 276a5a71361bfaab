//! `zk-curator dashboard`: every lock and election under a root, served
//! read-only over HTTP from one [`TreeObserver`]: a page that follows the
//! view live (server-sent events), the view as JSON, and OpenMetrics for
//! Prometheus, each read from the observer's view when asked.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Args;
use futures::Stream;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use regex::Regex;
use serde_json::{json, Value};
use tokio::signal::unix::{signal, SignalKind};
use zk_curator::framework::zk;
use zk_curator::recipes::layout::{Family, Role};
use zk_curator::recipes::tree::{ObservedPath, TreeObserver, TreeView};
use zk_curator::Framework;

use crate::connect::ConnectArgs;
use crate::duration::{parse_duration, show_duration};
use crate::exit::{out, printable, shown, Failure, NO_PARTICIPANT, OTHER, UNAVAILABLE};
use crate::locks::{now_ms, AllListing};

/// The page, whole: markup, style and script (no other asset, nothing
/// fetched from elsewhere).
const PAGE: &str = include_str!("dashboard/page.html");

/// The content type of an OpenMetrics scrape.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of Prometheus's text format.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Options of `dashboard`.
#[derive(Debug, Args)]
pub(crate) struct DashboardArgs {
    /// The root: every lock and election at or under it is shown.
    pub(crate) root: String,
    /// Where to listen, `ADDR:PORT` (port 0: any free port; the first line
    /// on stdout says which).
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7070")]
    pub(crate) bind: SocketAddr,
    /// If ROOT does not exist: serve anyway and show it once it is created
    /// (without --watch, exit 66).
    #[arg(long)]
    pub(crate) watch: bool,
    /// Follow at most this many paths; past it the page, the JSON
    /// (`capped`) and the metrics (`zk_curator_observer_capped`) say so.
    #[arg(long, value_name = "N", default_value = "10000", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_paths: u64,
    /// Flag a lock (not an election) whose path matches GLOB (`*` within
    /// one level, `**` across levels, `?` one character) when a holder has
    /// held it for longer than DURATION; known only for holders seen taking
    /// over. Repeatable: the first GLOB that matches applies.
    #[arg(long, value_name = "GLOB=DURATION", value_parser = parse_overdue)]
    pub(crate) overdue: Vec<Overdue>,
    /// Flag an election that has had no leader for longer than DURATION
    /// (known from when the dashboard saw it lose its leader).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub(crate) leaderless: Option<Duration>,
    /// In /metrics, count every path REGEX matches under the label
    /// TEMPLATE (`$1`, `${name}`: its groups), summing holders and waiters
    /// (the earliest timestamps, the number overdue). Repeatable: the first
    /// REGEX that matches applies.
    #[arg(long, value_name = "REGEX=TEMPLATE", value_parser = parse_group)]
    pub(crate) group: Vec<Group>,
    /// In /metrics, at most this many paths or groups (a few series each);
    /// the rest are left out and counted in
    /// `zk_curator_observer_series_dropped_total`.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_series: u64,
    #[command(flatten)]
    pub(crate) connect: ConnectArgs,
}

/// One `--overdue GLOB=DURATION` policy.
#[derive(Clone, Debug)]
pub(crate) struct Overdue {
    glob: String,
    matcher: Regex,
    limit: Duration,
}

/// One `--group REGEX=TEMPLATE`.
#[derive(Clone, Debug)]
pub(crate) struct Group {
    pattern: Regex,
    template: String,
}

fn parse_overdue(text: &str) -> Result<Overdue, String> {
    let (glob, limit) = text
        .rsplit_once('=')
        .ok_or_else(|| "write GLOB=DURATION, e.g. '/app/locks/**=5m'".to_owned())?;
    if !glob.starts_with('/') {
        return Err(format!("the glob {glob:?} is no absolute path"));
    }
    let limit = parse_duration(limit)?;
    Ok(Overdue {
        glob: glob.to_owned(),
        matcher: glob_regex(glob)?,
        limit,
    })
}

/// `glob` as an anchored regular expression: `**` any characters, `*` and
/// `?` any within one level, everything else itself.
fn glob_regex(glob: &str) -> Result<Regex, String> {
    let mut pattern = String::from("^");
    let mut chars = glob.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                pattern.push_str(".*");
            }
            '*' => pattern.push_str("[^/]*"),
            '?' => pattern.push_str("[^/]"),
            other => pattern.push_str(&regex::escape(&other.to_string())),
        }
    }
    pattern.push('$');
    Regex::new(&pattern).map_err(|err| format!("bad glob {glob:?}: {err}"))
}

fn parse_group(text: &str) -> Result<Group, String> {
    let (pattern, template) = text.split_once('=').ok_or_else(|| {
        "write REGEX=TEMPLATE, e.g. '^/app/jobs/([^/]+)/=/app/jobs/$1'".to_owned()
    })?;
    let pattern = Regex::new(pattern).map_err(|err| format!("bad regex: {err}"))?;
    if template.is_empty() {
        return Err("the template is empty".to_owned());
    }
    Ok(Group {
        pattern,
        template: template.to_owned(),
    })
}

/// The policies that flag a path, shared by the page and the metrics.
#[derive(Debug)]
struct Policy {
    overdue: Vec<Overdue>,
    leaderless: Option<Duration>,
}

/// What the page and the metrics say of one path, as of `now`.
#[derive(Debug)]
struct Facts {
    /// A short name of its recipe, for a label: `mutex`, `latch`,
    /// `read-write`, `lease`, `semaphore`, `kazoo-lock`, `kazoo-semaphore`
    /// (joined with `+` where several share the path), `unknown`.
    recipe: String,
    election: bool,
    holders: u64,
    waiters: u64,
    /// When the earliest holder began to hold, where seen (ms).
    hold_start_ms: Option<i64>,
    /// Since when an election has had no leader, where seen (ms).
    leaderless_since_ms: Option<i64>,
    leader_changes: u64,
    /// The `--overdue` policy that applies, and whether it is overdue.
    overdue: Option<(String, Duration, bool)>,
    /// Whether `--leaderless` flags it.
    leaderless: bool,
}

fn family_label(family: Family) -> &'static str {
    match family {
        Family::CuratorLock => "mutex",
        Family::CuratorLatch => "latch",
        Family::CuratorReadWrite => "read-write",
        Family::CuratorLease => "lease",
        Family::CuratorSemaphore => "semaphore",
        Family::KazooLock => "kazoo-lock",
        Family::KazooSemaphore => "kazoo-semaphore",
        _ => "other",
    }
}

fn span_ms(now: i64, since: i64) -> u128 {
    u128::try_from(now.saturating_sub(since)).unwrap_or(0)
}

impl Policy {
    fn facts(&self, path: &str, observed: &ObservedPath, now: i64) -> Facts {
        let recipe = if observed.families.is_empty() {
            "unknown".to_owned()
        } else {
            let labels: Vec<&str> = observed.families.iter().map(|f| family_label(*f)).collect();
            labels.join("+")
        };
        let election = observed.families.as_slice() == [Family::CuratorLatch];
        let holders = observed
            .participants
            .iter()
            .filter(|o| o.participant.role == Role::Holder);
        let holder_count = holders.clone().count() as u64;
        let hold_start_ms = holders.filter_map(|o| o.holding_since_ms).min();
        let waiters = observed.participants.len() as u64 - holder_count;
        let leaderless_since_ms = if election {
            observed.no_holder_since_ms
        } else {
            None
        };
        let overdue = if election {
            None
        } else {
            self.overdue
                .iter()
                .find(|policy| policy.matcher.is_match(path))
                .map(|policy| {
                    let late = hold_start_ms
                        .is_some_and(|since| span_ms(now, since) > policy.limit.as_millis());
                    (policy.glob.clone(), policy.limit, late)
                })
        };
        let leaderless = match (self.leaderless, leaderless_since_ms) {
            (Some(limit), Some(since)) => span_ms(now, since) > limit.as_millis(),
            _ => false,
        };
        Facts {
            recipe,
            election,
            holders: holder_count,
            waiters,
            hold_start_ms,
            leaderless_since_ms,
            leader_changes: observed.leader_changes,
            overdue,
            leaderless,
        }
    }
}

/// The families last seen on each followed path: an election whose last
/// participant left has none in the view, yet is still an election.
type Known = Arc<Mutex<HashMap<String, Vec<Family>>>>;

/// Takes in `view`'s families (and forgets the paths it no longer has).
fn remember(known: &Known, view: &TreeView) {
    if let Ok(mut known) = known.lock() {
        known.retain(|path, _| view.paths.contains_key(path));
        for (path, observed) in &view.paths {
            if !observed.families.is_empty() {
                known.insert(path.clone(), observed.families.clone());
            }
        }
    }
}

/// The view as the dashboard shows it: a path left without participants
/// is dropped (as `locks --all` leaves it out), unless it is an election
/// seen losing its leader, kept with its families as last seen so that
/// `--leaderless` can flag it.
fn shown_view(view: &TreeView, known: &Known) -> TreeView {
    remember(known, view);
    let mut shown = view.clone();
    let known = known.lock().map(|k| k.clone()).unwrap_or_default();
    shown.paths.retain(|path, observed| {
        if !observed.participants.is_empty() {
            return true;
        }
        let election = known
            .get(path)
            .is_some_and(|f| f.as_slice() == [Family::CuratorLatch]);
        if election && observed.no_holder_since_ms.is_some() {
            Arc::make_mut(observed).families = vec![Family::CuratorLatch];
            return true;
        }
        false
    });
    shown
}

/// What the server shares between requests.
#[derive(Debug)]
struct Shared {
    root: String,
    max_paths: u64,
    observer: TreeObserver,
    policy: Arc<Policy>,
    known: Known,
    registry: Registry,
    feed: Feed,
}

/// What `/events` sends, built once for every connection: the view as
/// last sent (with its number) and the changes since, numbered in order.
/// A connection starts from the view, then takes each change numbered
/// after it; one that falls more than [`FEED_BACKLOG`] changes behind
/// (a slow or stalled reader) is sent the whole view again.
#[derive(Debug)]
struct Feed {
    state: Mutex<FeedState>,
    changes: tokio::sync::broadcast::Sender<(u64, Arc<str>)>,
}

/// The feed's view as last sent.
#[derive(Debug, Default)]
struct FeedState {
    /// The number of the last change sent.
    seq: u64,
    /// The view as shown then.
    view: Arc<TreeView>,
    /// Each path's flags then (they change with time, too).
    flags: HashMap<String, Vec<&'static str>>,
}

/// A connection's receiver of the feed's numbered changes.
type Changes = tokio::sync::broadcast::Receiver<(u64, Arc<str>)>;

/// Where a connection is in the feed: the number of the last change it
/// was sent, and its receiver (`None` before its first event).
type Position = Option<(u64, Changes)>;

/// How many changes the feed keeps for connections behind it: past that a
/// connection gets the whole view again, so memory stays bounded whatever
/// the readers do.
const FEED_BACKLOG: usize = 16;

/// How often flags that change with time alone (overdue, leaderless) are
/// looked at again.
const FEED_TICK: Duration = Duration::from_secs(1);

impl Feed {
    fn new() -> Self {
        Feed {
            state: Mutex::new(FeedState::default()),
            changes: tokio::sync::broadcast::channel(FEED_BACKLOG).0,
        }
    }

    /// The view as last sent, its number, and a receiver of the changes
    /// after it (taken together, so none is missed or sent twice).
    fn start(&self) -> (u64, Arc<TreeView>, Changes) {
        let state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (state.seq, state.view.clone(), self.changes.subscribe())
    }
}

/// Follows the observer (and the clock, for flags) and sends each change
/// once: the paths whose entry changed, the paths gone, and the view's own
/// fields.
async fn feed(shared: Arc<Shared>) {
    let mut changes = shared.observer.changes();
    let mut tick = tokio::time::interval(FEED_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let view = Arc::new(shown_view(
            &changes.borrow_and_update().clone(),
            &shared.known,
        ));
        let now = now_ms();
        let flags: HashMap<String, Vec<&'static str>> = view
            .paths
            .iter()
            .map(|(path, observed)| {
                (
                    path.clone(),
                    flags_of(&shared.policy.facts(path, observed, now), observed),
                )
            })
            .collect();
        {
            let mut state = shared
                .feed
                .state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let before = state.view.clone();
            let changed: std::collections::BTreeSet<&String> = view
                .paths
                .iter()
                .filter(|(path, observed)| {
                    let same = before
                        .paths
                        .get(*path)
                        .is_some_and(|old| Arc::ptr_eq(old, observed) || **old == ***observed);
                    !same || state.flags.get(*path) != flags.get(*path)
                })
                .map(|(path, _)| path)
                .collect();
            let removed: Vec<&String> = before
                .paths
                .keys()
                .filter(|path| !view.paths.contains_key(*path))
                .collect();
            let fields_changed = before.current != view.current
                || before.since_ms != view.since_ms
                || before.capped != view.capped
                || before.listings != view.listings
                || before.events != view.events;
            if !changed.is_empty() || !removed.is_empty() || fields_changed {
                let mut part = (*view).clone();
                part.paths.retain(|path, _| changed.contains(path));
                let mut message = view_json(&shared, &part, now);
                let seq = state.seq + 1;
                message["seq"] = json!(seq);
                message["removed"] = json!(removed);
                let text: Arc<str> = json_text(&message).into();
                state.seq = seq;
                state.view = view.clone();
                state.flags = flags;
                // No receiver is no error: nobody is watching.
                let _ = shared.feed.changes.send((seq, text));
            }
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = tick.tick() => {}
        }
    }
}

/// The flags of a path (as the page and the snapshot show them).
fn flags_of(facts: &Facts, observed: &ObservedPath) -> Vec<&'static str> {
    let mut flags = Vec::new();
    if facts.overdue.as_ref().is_some_and(|o| o.2) {
        flags.push("overdue");
    }
    if facts.leaderless {
        flags.push("leaderless");
    }
    if observed.unknown.count > 0 {
        flags.push("unknown");
    }
    flags
}

/// `zk-curator dashboard ROOT`: binds, connects, checks the root, then
/// serves until SIGINT or SIGTERM (exit 0).
pub(crate) async fn run(args: DashboardArgs) -> Result<u8, Failure> {
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|err| {
            let why = if err.kind() == std::io::ErrorKind::AddrInUse {
                format!("port {} is taken", args.bind.port())
            } else {
                format!("port {}: {err}", args.bind.port())
            };
            Failure::new(
                UNAVAILABLE,
                format!("cannot listen on {}: {why}", args.bind),
            )
        })?;
    let address = listener
        .local_addr()
        .map_err(|err| Failure::new(OTHER, format!("cannot read the bound address: {err}")))?;
    let settings = crate::connect::Settings::from_args(&args.connect)?;
    let framework = crate::connect::connect(&settings, None).await?;
    let served = serve(&framework, args, listener, address).await;
    crate::connect::close(&framework, true).await;
    served
}

async fn serve(
    framework: &Framework,
    args: DashboardArgs,
    listener: tokio::net::TcpListener,
    address: SocketAddr,
) -> Result<u8, Failure> {
    let root = args.root.as_str();
    if !root_exists(framework, root).await? {
        if !args.watch {
            return Err(Failure::new(
                NO_PARTICIPANT,
                format!(
                    "{} does not exist; --watch serves anyway and shows it once it is created",
                    shown(root)
                ),
            ));
        }
        eprintln!(
            "zk-curator: {} does not exist yet; the dashboard shows it once it is created",
            shown(root)
        );
    }
    let failed = |err| Failure::zk(format!("cannot watch the locks under {}", shown(root)), err);
    let max_paths = usize::try_from(args.max_paths).unwrap_or(usize::MAX);
    let observer = TreeObserver::new(framework.clone(), root, max_paths).map_err(failed)?;
    observer.start().map_err(failed)?;
    let policy = Arc::new(Policy {
        overdue: args.overdue,
        leaderless: args.leaderless,
    });
    let known = Known::default();
    // Families are taken in at every change, not only when asked: an
    // election's last participant may leave between two requests.
    let mut changes = observer.changes();
    let tracked = known.clone();
    let tracker = tokio::spawn(async move {
        loop {
            let view = changes.borrow_and_update().clone();
            remember(&tracked, &view);
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Metrics {
        observer: observer.clone(),
        known: known.clone(),
        policy: policy.clone(),
        groups: args.group,
        max_series: usize::try_from(args.max_series).unwrap_or(usize::MAX),
        dropped: AtomicU64::new(0),
    }));
    let shared = Arc::new(Shared {
        root: root.to_owned(),
        max_paths: args.max_paths,
        observer: observer.clone(),
        policy,
        known,
        registry,
        feed: Feed::new(),
    });
    let feeding = tokio::spawn(feed(shared.clone()));
    let app = Router::new()
        .route("/", get(page))
        .route("/events", get(events))
        .route("/api/snapshot", get(snapshot))
        .route("/metrics", get(metrics))
        .with_state(shared);
    out(format!("dashboard on http://{address}/"))?;
    let mut interrupt = signal(SignalKind::interrupt())
        .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGINT: {err}")))?;
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|err| Failure::new(OTHER, format!("cannot handle SIGTERM: {err}")))?;
    // Open event streams never end by themselves: a stop ends the server
    // at once rather than waiting for them.
    let ended = tokio::select! {
        served = axum::serve(listener, app) => served
            .map_err(|err| Failure::new(OTHER, format!("the server stopped: {err}")))
            .map(|()| 0),
        _ = interrupt.recv() => Ok(0),
        _ = terminate.recv() => Ok(0),
    };
    tracker.abort();
    feeding.abort();
    observer.close().await;
    ended
}

async fn root_exists(framework: &Framework, root: &str) -> Result<bool, Failure> {
    let client = framework
        .client()
        .await
        .map_err(|err| Failure::zk(format!("cannot read {}", shown(root)), err))?;
    match client.check_stat(root).await {
        Ok(stat) => Ok(stat.is_some()),
        Err(zk::Error::NoNode) => Ok(false),
        Err(err) => Err(Failure::zk(
            format!("cannot read {}", shown(root)),
            err.into(),
        )),
    }
}

/// A response whose body is `body`, of type `content_type`, never cached.
fn respond(content_type: &'static str, body: String) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'",
        ),
    );
    response
}

async fn page() -> Response {
    respond("text/html; charset=utf-8", PAGE.to_owned())
}

async fn snapshot(State(shared): State<Arc<Shared>>) -> Response {
    let view = shown_view(&shared.observer.view(), &shared.known);
    respond(
        "application/json",
        json_text(&view_json(&shared, &view, now_ms())),
    )
}

/// The whole view (event `view`, with the number of the last change it
/// holds, `seq`), then each change after it (event `change`: the paths
/// whose entry changed, in full, `removed` for the paths gone, and the
/// view's own fields), built once by the [`feed`] for every connection. A
/// client that reads slowly (or never) holds back nothing: past
/// [`FEED_BACKLOG`] changes behind, it is sent the whole view again when
/// it reads.
async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let stream = futures::stream::unfold(
        (shared, None),
        |(shared, started): (Arc<Shared>, Position)| async move {
            let (seq, mut changes) = match started {
                Some(started) => started,
                None => return Some(whole_view(shared)),
            };
            loop {
                match changes.recv().await {
                    Ok((number, _)) if number <= seq => {}
                    Ok((number, text)) => {
                        let event = Event::default().event("change").data(&*text);
                        return Some((Ok(event), (shared, Some((number, changes)))));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        return Some(whole_view(shared));
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                }
            }
        },
    );
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The `view` event of the feed's view, and where the connection goes on
/// from.
fn whole_view(shared: Arc<Shared>) -> (Result<Event, Infallible>, (Arc<Shared>, Position)) {
    let (seq, view, changes) = shared.feed.start();
    let mut message = view_json(&shared, &view, now_ms());
    message["seq"] = json!(seq);
    let event = Event::default().event("view").data(json_text(&message));
    (Ok(event), (shared, Some((seq, changes))))
}

/// `/metrics`: OpenMetrics when the scraper accepts it (Prometheus asks
/// for it), else Prometheus's text format 0.0.4 (what `promtool check
/// metrics` and older scrapers read).
async fn metrics(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .any(|value| value.contains("application/openmetrics-text"));
    let mut text = String::new();
    let (written, content_type) = if openmetrics {
        let written = prometheus_client::encoding::text::encode(&mut text, &shared.registry);
        (written, OPENMETRICS)
    } else {
        let written =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &shared.registry);
        (written, PROMETHEUS_TEXT)
    };
    match written {
        Ok(()) => respond(content_type, text),
        Err(fmt::Error) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be written",
        )
            .into_response(),
    }
}

/// `value` as JSON text that neither a page nor a terminal can take for
/// more than data: every control character escaped (see [`printable`]),
/// and `<`, `>`, `&` and `'` written as `\u003c`... (the same JSON value).
fn json_text(value: &Value) -> String {
    let text = value.to_string();
    let text = printable(&text);
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => escaped.push_str("\\u003c"),
            '>' => escaped.push_str("\\u003e"),
            '&' => escaped.push_str("\\u0026"),
            '\'' => escaped.push_str("\\u0027"),
            c => escaped.push(c),
        }
    }
    escaped
}

/// The view as `locks ROOT --all --json` prints it, with whether it is
/// current and since when, the observer's counts, and each path's flags.
fn view_json(shared: &Shared, view: &TreeView, now: i64) -> Value {
    let mut listing = AllListing::of_view(view).json(&shared.root);
    if let Some(paths) = listing["paths"].as_array_mut() {
        for (entry, (path, observed)) in paths.iter_mut().zip(&view.paths) {
            let facts = shared.policy.facts(path, observed, now);
            let flags = flags_of(&facts, observed);
            entry["label"] = json!(facts.recipe);
            entry["holders"] = json!(facts.holders);
            entry["waiters"] = json!(facts.waiters);
            entry["hold_start_ms"] = json!(facts.hold_start_ms);
            entry["leaderless_since_ms"] = json!(facts.leaderless_since_ms);
            entry["leader_changes"] = json!(facts.leader_changes);
            entry["overdue_after"] = json!(facts
                .overdue
                .as_ref()
                .map(|(glob, limit, _)| format!("{glob}={}", show_duration(*limit))));
            entry["flags"] = json!(flags);
        }
    }
    listing["current"] = json!(view.current);
    listing["since_ms"] = json!(view.since_ms);
    listing["now_ms"] = json!(now);
    listing["max_paths"] = json!(shared.max_paths);
    listing["listings"] = json!(view.listings);
    listing["events"] = json!(view.events);
    listing["leaderless_after"] = json!(shared.policy.leaderless.map(show_duration));
    listing
}

/// The collector of `/metrics`: everything is read from the observer's
/// view at each scrape, so a lock's series go with the lock.
#[derive(Debug)]
struct Metrics {
    observer: TreeObserver,
    known: Known,
    policy: Arc<Policy>,
    groups: Vec<Group>,
    max_series: usize,
    /// Paths or groups left out by `--max-series`, over every scrape.
    dropped: AtomicU64,
}

/// One label set's sums.
#[derive(Debug, Default)]
struct Sums {
    holders: u64,
    waiters: u64,
    hold_start_ms: Option<i64>,
    leaderless_since_ms: Option<i64>,
    leader_changes: u64,
    overdue: Option<u64>,
    leaderless: Option<u64>,
    election: bool,
}

fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Milliseconds since the epoch as seconds.
#[allow(clippy::cast_precision_loss)]
fn seconds(ms: i64) -> f64 {
    ms as f64 / 1000.0
}

impl Metrics {
    /// The label a path is counted under: its group's, or its own.
    fn label(&self, path: &str) -> String {
        for group in &self.groups {
            if let Some(captures) = group.pattern.captures(path) {
                let mut label = String::new();
                captures.expand(&group.template, &mut label);
                return label;
            }
        }
        path.to_owned()
    }

    fn sums(&self, view: &TreeView, now: i64) -> BTreeMap<(String, String), Sums> {
        let mut sums: BTreeMap<(String, String), Sums> = BTreeMap::new();
        for (path, observed) in &view.paths {
            let facts = self.policy.facts(path, observed, now);
            let entry = sums.entry((self.label(path), facts.recipe)).or_default();
            entry.holders += facts.holders;
            entry.waiters += facts.waiters;
            entry.hold_start_ms = earliest(entry.hold_start_ms, facts.hold_start_ms);
            entry.leaderless_since_ms =
                earliest(entry.leaderless_since_ms, facts.leaderless_since_ms);
            entry.leader_changes += facts.leader_changes;
            entry.election |= facts.election;
            if let Some((_, _, late)) = facts.overdue {
                *entry.overdue.get_or_insert(0) += u64::from(late);
            }
            if facts.election && self.policy.leaderless.is_some() {
                *entry.leaderless.get_or_insert(0) += u64::from(facts.leaderless);
            }
        }
        sums
    }
}

/// Writes one gauge family: a sample for each label set `value` gives one.
fn gauge<V: prometheus_client::encoding::EncodeGaugeValue>(
    encoder: &mut DescriptorEncoder<'_>,
    (name, help, unit): (&str, &str, Option<&Unit>),
    sums: &[(&(String, String), &Sums)],
    value: impl Fn(&Sums) -> Option<V>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, unit, MetricType::Gauge)?;
    for ((path, recipe), sums) in sums {
        if let Some(v) = value(sums) {
            let labels = [("path", path.as_str()), ("recipe", recipe.as_str())];
            family.encode_family(&labels)?.encode_gauge(&v)?;
        }
    }
    Ok(())
}

fn counter(encoder: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Counter)?
        .encode_counter::<NoLabelSet, u64, f64>(&value, None)
}

fn single_gauge(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    value: i64,
) -> fmt::Result {
    encoder
        .encode_descriptor(name, help, None, MetricType::Gauge)?
        .encode_gauge(&value)
}

impl Collector for Metrics {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let view = shown_view(&self.observer.view(), &self.known);
        let all = self.sums(&view, now_ms());
        let kept: Vec<_> = all.iter().take(self.max_series).collect();
        let left_out = (all.len() - kept.len()) as u64;
        let dropped = self.dropped.fetch_add(left_out, Ordering::Relaxed) + left_out;
        let seconds_unit = Unit::Seconds;
        let enc = &mut encoder;
        gauge(
            enc,
            (
                "zk_curator_lock_holders",
                "Holders of the lock (an election's leader)",
                None,
            ),
            &kept,
            |s| Some(s.holders),
        )?;
        gauge(
            enc,
            (
                "zk_curator_lock_waiters",
                "Participants queued behind the holders",
                None,
            ),
            &kept,
            |s| Some(s.waiters),
        )?;
        gauge(
            enc,
            (
                "zk_curator_lock_hold_start_timestamp",
                "When the earliest holder began to hold, where the dashboard saw it take over",
                Some(&seconds_unit),
            ),
            &kept,
            |s| s.hold_start_ms.map(seconds),
        )?;
        gauge(
            enc,
            (
                "zk_curator_lock_overdue",
                "Locks whose holder has held longer than their --overdue limit",
                None,
            ),
            &kept,
            |s| s.overdue,
        )?;
        gauge(
            enc,
            (
                "zk_curator_election_leaderless_since_timestamp",
                "Since when the election has had no leader, where the dashboard saw it lose it",
                Some(&seconds_unit),
            ),
            &kept,
            |s| s.leaderless_since_ms.map(seconds),
        )?;
        gauge(
            enc,
            (
                "zk_curator_election_leaderless",
                "Elections without a leader for longer than --leaderless",
                None,
            ),
            &kept,
            |s| s.leaderless,
        )?;
        gauge(
            enc,
            (
                "zk_curator_election_leader_changes",
                "Changes of leader (first holder) seen since the dashboard began following",
                None,
            ),
            &kept,
            |s| s.election.then_some(s.leader_changes),
        )?;
        single_gauge(
            enc,
            "zk_curator_observer_connected",
            "Whether the view is current (connected, listed, every change applied)",
            i64::from(view.current),
        )?;
        single_gauge(
            enc,
            "zk_curator_observer_paths",
            "Locks and elections followed",
            i64::try_from(view.paths.len()).unwrap_or(i64::MAX),
        )?;
        single_gauge(
            enc,
            "zk_curator_observer_capped",
            "Whether --max-paths cut the view",
            i64::from(view.capped),
        )?;
        counter(
            enc,
            "zk_curator_observer_listings",
            "Times the tree was listed afresh (one per session or reconnection)",
            view.listings,
        )?;
        counter(
            enc,
            "zk_curator_observer_events",
            "ZooKeeper events applied to the view",
            view.events,
        )?;
        counter(
            enc,
            "zk_curator_observer_series_dropped",
            "Paths or groups left out of scrapes by --max-series",
            dropped,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_within_and_across_levels() {
        let any = glob_regex("/app/**").unwrap_or_else(|e| panic!("{e}"));
        assert!(any.is_match("/app/a/b/c"));
        assert!(!any.is_match("/other/a"));
        let one = glob_regex("/app/*/lock?").unwrap_or_else(|e| panic!("{e}"));
        assert!(one.is_match("/app/x/lock1"));
        assert!(!one.is_match("/app/x/y/lock1"));
        let dots = glob_regex("/a.b").unwrap_or_else(|e| panic!("{e}"));
        assert!(!dots.is_match("/axb"));
    }

    #[test]
    fn json_text_escapes_markup_and_controls_and_parses_back() {
        let value = json!({ "id": "<script>alert(1)</script>\"'&\u{1b}\n" });
        let text = json_text(&value);
        for raw in ['<', '>', '&', '\'', '\u{1b}', '\n'] {
            assert!(!text.contains(raw), "{raw:?} in {text}");
        }
        let back: Value = serde_json::from_str(&text).unwrap_or_default();
        assert_eq!(back, value);
    }
}
