//! Observability (`cairn::observe`, `docs/observability.md`): the documentation names every span
//! and metric; with the `tracing` and `metrics` features, a durable session's open, recovery,
//! writes, lookups, merges, checkpoint, snapshot save and open, and an authenticated commit emit
//! the documented spans, with their fields, and move the documented metrics.
//!
//! The recording subscriber and recorder are installed process-wide (the log's syncer and a
//! merge may run on other threads), so the feature test is one test function.

use std::path::Path;

use cairn::observe;

#[test]
fn the_docs_name_every_span_and_metric() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/observability.md");
    let doc = std::fs::read_to_string(doc).unwrap();
    for name in observe::SPANS.iter().chain(&observe::METRICS) {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/observability.md does not name `{name}`"
        );
    }
}

#[cfg(all(feature = "tracing", feature = "metrics"))]
mod recording {
    //! A `tracing` subscriber that keeps every span (name, fields, parent) and a `metrics`
    //! recorder that keeps every counter, gauge and histogram, both in statics.

    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};

    use metrics::{Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata};
    use metrics::{SharedString, Unit};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Subscriber};

    /// A span seen: its name, its fields (as recorded, last value kept) and its parent's index.
    #[derive(Clone, Debug)]
    pub struct SpanSeen {
        pub name: &'static str,
        pub fields: BTreeMap<String, String>,
        pub parent: Option<usize>,
    }

    pub static SPANS: Mutex<Vec<SpanSeen>> = Mutex::new(Vec::new());

    thread_local! {
        /// The spans entered on this thread, innermost last (indexes into `SPANS`).
        static STACK: RefCell<Vec<usize>> = const { RefCell::new(Vec::new()) };
    }

    struct Fields<'a>(&'a mut BTreeMap<String, String>);

    impl Visit for Fields<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            self.0
                .insert(field.name().to_string(), format!("{value:?}"));
        }
        fn record_str(&mut self, field: &Field, value: &str) {
            self.0.insert(field.name().to_string(), value.to_string());
        }
    }

    pub struct Collector;

    impl Subscriber for Collector {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, attributes: &Attributes<'_>) -> Id {
            let mut fields = BTreeMap::new();
            attributes.record(&mut Fields(&mut fields));
            let parent = match attributes.parent() {
                Some(id) => Some(id.into_u64() as usize - 1),
                None if attributes.is_contextual() => STACK.with(|s| s.borrow().last().copied()),
                None => None,
            };
            let mut spans = SPANS.lock().unwrap();
            spans.push(SpanSeen {
                name: attributes.metadata().name(),
                fields,
                parent,
            });
            Id::from_u64(spans.len() as u64)
        }
        fn record(&self, id: &Id, values: &Record<'_>) {
            let mut spans = SPANS.lock().unwrap();
            let span = &mut spans[id.into_u64() as usize - 1];
            values.record(&mut Fields(&mut span.fields));
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, _: &Event<'_>) {}
        fn enter(&self, id: &Id) {
            STACK.with(|s| s.borrow_mut().push(id.into_u64() as usize - 1));
        }
        fn exit(&self, id: &Id) {
            STACK.with(|s| {
                let mut stack = s.borrow_mut();
                if stack.last() == Some(&(id.into_u64() as usize - 1)) {
                    stack.pop();
                }
            });
        }
    }

    /// A histogram's values.
    #[derive(Default)]
    pub struct Values(pub Mutex<Vec<f64>>);

    impl HistogramFn for Values {
        fn record(&self, value: f64) {
            self.0.lock().unwrap().push(value);
        }
    }

    pub static COUNTERS: Mutex<BTreeMap<String, Arc<AtomicU64>>> = Mutex::new(BTreeMap::new());
    pub static GAUGES: Mutex<BTreeMap<String, Arc<AtomicU64>>> = Mutex::new(BTreeMap::new());
    pub static HISTOGRAMS: Mutex<BTreeMap<String, Arc<Values>>> = Mutex::new(BTreeMap::new());
    pub static DESCRIBED: Mutex<Vec<(String, Option<Unit>)>> = Mutex::new(Vec::new());

    pub struct Recorder;

    impl metrics::Recorder for Recorder {
        fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            DESCRIBED
                .lock()
                .unwrap()
                .push((key.as_str().to_string(), unit));
        }
        fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            DESCRIBED
                .lock()
                .unwrap()
                .push((key.as_str().to_string(), unit));
        }
        fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
            DESCRIBED
                .lock()
                .unwrap()
                .push((key.as_str().to_string(), unit));
        }
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            let mut all = COUNTERS.lock().unwrap();
            Counter::from_arc(all.entry(key.name().to_string()).or_default().clone())
        }
        fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
            let mut all = GAUGES.lock().unwrap();
            Gauge::from_arc(all.entry(key.name().to_string()).or_default().clone())
        }
        fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
            let mut all = HISTOGRAMS.lock().unwrap();
            Histogram::from_arc(all.entry(key.name().to_string()).or_default().clone())
        }
    }

    /// Counter `name`'s value (0 if never counted).
    pub fn counter(name: &str) -> u64 {
        COUNTERS
            .lock()
            .unwrap()
            .get(name)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Gauge `name`'s value (0 if never set).
    pub fn gauge(name: &str) -> f64 {
        GAUGES
            .lock()
            .unwrap()
            .get(name)
            .map_or(0.0, |g| f64::from_bits(g.load(Ordering::Relaxed)))
    }

    /// Histogram `name`'s values.
    pub fn histogram(name: &str) -> Vec<f64> {
        HISTOGRAMS
            .lock()
            .unwrap()
            .get(name)
            .map_or(Vec::new(), |h| h.0.lock().unwrap().clone())
    }

    /// The spans named `name` seen from index `from` on.
    pub fn spans(name: &str, from: usize) -> Vec<SpanSeen> {
        SPANS.lock().unwrap()[from..]
            .iter()
            .filter(|s| s.name == name)
            .cloned()
            .collect()
    }

    /// Spans seen so far.
    pub fn span_count() -> usize {
        SPANS.lock().unwrap().len()
    }

    /// The name of span `index`'s parent.
    pub fn parent_name(span: &SpanSeen) -> Option<&'static str> {
        span.parent.map(|p| SPANS.lock().unwrap()[p].name)
    }
}

#[cfg(all(feature = "tracing", feature = "metrics"))]
#[test]
fn a_durable_session_emits_the_documented_spans_and_metrics() {
    use cairn::{AuthConfig, LookupResult, Session, SnapshotOverrides, TableConfig, Update};
    use recording::{counter, gauge, histogram, parent_name, span_count, spans};

    tracing::subscriber::set_global_default(recording::Collector).unwrap();
    metrics::set_global_recorder(recording::Recorder).unwrap();
    observe::describe_metrics();
    let described = recording::DESCRIBED.lock().unwrap().clone();
    for name in observe::METRICS {
        assert!(described.iter().any(|(n, _)| n == name), "{name} described");
    }

    let dir = tempfile::tempdir().unwrap();
    let small = TableConfig::default()
        .write_buffer_entries(8)
        .merge_batch_size(2);

    // Open: a session span, a recovery span inside it (nothing to replay yet).
    let session = Session::open(dir.path()).unwrap();
    let open = spans(observe::SPAN_SESSION_OPEN, 0);
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].fields["dir"], dir.path().display().to_string());
    assert_eq!(open[0].fields["read_only"], "false");
    assert_eq!(open[0].fields["durable_tables"], "0");
    let recover = spans(observe::SPAN_LOG_RECOVER, 0);
    assert_eq!(recover.len(), 1);
    assert_eq!(recover[0].fields["records_replayed"], "0");
    assert_eq!(parent_name(&recover[0]), Some(observe::SPAN_SESSION_OPEN));

    // Writes, in batches of 10: each batch counted once, its bytes logged and fsynced.
    let table = session
        .create_durable_table("plain", small.clone())
        .unwrap();
    let updates_before = counter(observe::UPDATES_TOTAL);
    // In an order that makes runs overlap (keys in order would make merges link whole parts).
    let keys: Vec<Vec<u8>> = (0..400u32)
        .map(|i| format!("key{:05}", i * 7919 % 400).into_bytes())
        .collect();
    for chunk in keys.chunks(10) {
        let batch: Vec<(&[u8], Update<'_>)> = chunk
            .iter()
            .map(|k| (&k[..], Update::Insert(b"value")))
            .collect();
        table.write(&batch).unwrap().wait().unwrap();
    }
    assert_eq!(counter(observe::UPDATES_TOTAL) - updates_before, 400);
    assert!(counter(observe::BYTES_WRITTEN_TOTAL) > 400 * 8);
    assert!(!histogram(observe::LOG_FSYNC_SECONDS).is_empty());
    assert!(histogram(observe::LOG_FSYNC_SECONDS)
        .iter()
        .all(|s| *s >= 0.0));

    // Lookups: one batch of 50 counted as 50; their pages read.
    let lookups_before = counter(observe::LOOKUPS_TOTAL);
    let read_before = counter(observe::BYTES_READ_TOTAL);
    let results = table.lookups(&keys[..50]).unwrap();
    assert!(results.iter().all(|r| matches!(r, LookupResult::Found(_))));
    assert_eq!(counter(observe::LOOKUPS_TOTAL) - lookups_before, 50);
    assert!(counter(observe::BYTES_READ_TOTAL) > read_before);

    // Merges: 400 updates through a buffer of 8 start merges and pay them in batches.
    let mark = span_count();
    table.complete_merges().unwrap();
    assert!(counter(observe::MERGES_TOTAL) > 0);
    assert!(counter(observe::MERGE_STEPS_TOTAL) > 0);
    let steps = spans(observe::SPAN_MERGE_STEPS, 0);
    assert!(!steps.is_empty());
    assert!(steps.iter().all(|s| s.fields.contains_key("steps_done")));
    let finished = spans(observe::SPAN_MERGE_FINISH, 0);
    assert!(!finished.is_empty());
    assert!(finished.iter().all(|s| s.fields.contains_key("entries")));
    assert!(span_count() > mark);
    assert!(gauge(observe::MERGE_DEBT) >= 0.0);

    // A checkpoint.
    let mark = span_count();
    let checkpoints_before = counter(observe::CHECKPOINTS_TOTAL);
    session.checkpoint().unwrap();
    assert_eq!(counter(observe::CHECKPOINTS_TOTAL) - checkpoints_before, 1);
    let checkpoint = spans(observe::SPAN_CHECKPOINT, mark);
    assert_eq!(checkpoint.len(), 1);
    assert_eq!(checkpoint[0].fields["tables"], "1");
    // Its table saved as a checkpoint snapshot inside it.
    let saves = spans(observe::SPAN_SNAPSHOT_SAVE, mark);
    assert_eq!(saves.len(), 1);
    assert_eq!(parent_name(&saves[0]), Some(observe::SPAN_CHECKPOINT));

    // A snapshot saved and opened.
    let mark = span_count();
    table.save_snapshot("snap", "test").unwrap();
    let opened = session
        .open_snapshot("snap", "test", SnapshotOverrides::default())
        .unwrap();
    let saves = spans(observe::SPAN_SNAPSHOT_SAVE, mark);
    assert_eq!(saves.len(), 1);
    assert_eq!(saves[0].fields["snapshot"], "snap");
    assert_eq!(saves[0].fields["label"], "test");
    assert_eq!(saves[0].fields["authenticated"], "false");
    let opens = spans(observe::SPAN_SNAPSHOT_OPEN, mark);
    assert_eq!(opens.len(), 1);
    assert_eq!(opens[0].fields["snapshot"], "snap");
    drop(opened);

    // An authenticated commit of 20 keys, timed; a commit with nothing to do is not counted.
    let ledger = session
        .create_durable_table("ledger", small.auth(Some(AuthConfig::default())))
        .unwrap();
    let batch: Vec<(&[u8], Update<'_>)> = keys[..20]
        .iter()
        .map(|k| (&k[..], Update::Insert(b"balance")))
        .collect();
    ledger.write(&batch).unwrap();
    let mark = span_count();
    let commits_before = counter(observe::AUTH_COMMITS_TOTAL);
    let commit = ledger.commit().unwrap();
    ledger.commit().unwrap();
    assert_eq!(counter(observe::AUTH_COMMITS_TOTAL) - commits_before, 1);
    assert!(!histogram(observe::AUTH_COMMIT_SECONDS).is_empty());
    let commits = spans(observe::SPAN_AUTH_COMMIT, mark);
    assert_eq!(commits.len(), 1);
    assert_eq!(commits[0].fields["keys"], "20");
    assert_eq!(commits[0].fields["version"], commit.version.to_string());

    // Reopened after a crash-like drop (no clean-close checkpoint): the log is replayed.
    drop((table, ledger));
    drop(session);
    let mark = span_count();
    let session = Session::open(dir.path()).unwrap();
    let open = spans(observe::SPAN_SESSION_OPEN, mark);
    assert_eq!(open[0].fields["durable_tables"], "2");
    let recover = spans(observe::SPAN_LOG_RECOVER, mark);
    assert_eq!(recover[0].fields["tables"], "2");
    let opens = spans(observe::SPAN_SNAPSHOT_OPEN, mark);
    assert_eq!(opens.len(), 2, "each durable table's checkpoint opened");
    assert!(opens
        .iter()
        .all(|s| parent_name(s) == Some(observe::SPAN_LOG_RECOVER)));
    drop(session);

    // Every documented span was seen and every metric registered.
    for name in observe::SPANS {
        assert!(!spans(name, 0).is_empty(), "span {name} never seen");
    }
    for name in observe::METRICS {
        let seen = recording::COUNTERS.lock().unwrap().contains_key(name)
            || recording::GAUGES.lock().unwrap().contains_key(name)
            || recording::HISTOGRAMS.lock().unwrap().contains_key(name);
        assert!(seen, "metric {name} never registered");
    }
    // With every table gone, no merge is owed.
    assert_eq!(gauge(observe::MERGE_DEBT), 0.0);
}
