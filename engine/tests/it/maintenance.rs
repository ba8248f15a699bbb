//! Checkpoints off the request path and retention (issue #17, `docs/durability.md`,
//! "Checkpoint", "Maintenance", "Retention"): writers do not wait for a checkpoint's files; the
//! maintenance thread checkpoints without being asked; the store keeps two checkpoints and the
//! log from the older one, and nothing else; it recovers from the older checkpoint when the
//! newest is damaged, and refuses to open (never opens with less) when both are.

use super::support::small_options;
use amberdb::KernelError;
use amberdb::storage::{FaultyStorage, Storage, StorageFile, StorageLock};
use amberdb::{EngineError, MemoryId, NewMemory, SearchRequest, Store, StoreRequest};
use amberdb_index::SealedBytes;
use std::io;
use std::path::Path;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DIR: &str = "/s";

fn unit(i: u64) -> Vec<f32> {
    let mut v = [0.1f32; 8];
    v[(i % 8) as usize] = 1.0;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn store_note(store: &Store, i: u64, text: &str) -> MemoryId {
    store
        .store(StoreRequest::new(NewMemory::new(text)).with_vector(unit(i)))
        .unwrap()
        .memory_id
}

fn files(fs: &FaultyStorage, prefix: &str) -> Vec<String> {
    let mut names: Vec<String> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    names
}

fn seq_of(name: &str) -> u64 {
    name.trim_start_matches("ckpt-")
        .trim_start_matches("wal-")
        .split('.')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// Which operation on a checkpoint file a `GatedStorage` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Its rename into place (C4).
    Rename,
    /// Reading or mapping it (a purge's P5 reads it back).
    Read,
}

/// `FaultyStorage` whose first `gate` of a checkpoint file waits until the test lets it go.
#[derive(Debug)]
struct GatedStorage {
    inner: FaultyStorage,
    gate: Gate,
    /// Told when a checkpoint's rename is reached.
    reached: Mutex<Option<mpsc::Sender<()>>>,
    /// The rename goes on when this receives.
    release: Mutex<Option<mpsc::Receiver<()>>>,
}

impl GatedStorage {
    fn new(
        inner: &FaultyStorage,
        gate: Gate,
    ) -> (Arc<GatedStorage>, mpsc::Receiver<()>, mpsc::Sender<()>) {
        let (reached_tx, reached) = mpsc::channel();
        let (release, release_rx) = mpsc::channel();
        let gated = Arc::new(GatedStorage {
            inner: inner.clone(),
            gate,
            reached: Mutex::new(Some(reached_tx)),
            release: Mutex::new(Some(release_rx)),
        });
        (gated, reached, release)
    }

    /// The first time `path` is a checkpoint file: says so, then waits to be let go.
    fn hold_if_checkpoint(&self, path: &Path) {
        let is_checkpoint = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("ckpt-"));
        if is_checkpoint {
            let reached = self.reached.lock().unwrap().take();
            if let Some(reached) = reached {
                reached.send(()).unwrap();
                let release = self.release.lock().unwrap().take().unwrap();
                release.recv().unwrap();
            }
        }
    }
}

impl Storage for GatedStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        if self.gate == Gate::Read {
            self.hold_if_checkpoint(path);
        }
        self.inner.read(path)
    }
    fn map(&self, path: &Path) -> io::Result<SealedBytes> {
        if self.gate == Gate::Read {
            self.hold_if_checkpoint(path);
        }
        self.inner.map(path)
    }
    fn create(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.inner.create(path)
    }
    fn open_append(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.inner.open_append(path)
    }
    fn truncate(&self, path: &Path, len: u64) -> io::Result<()> {
        self.inner.truncate(path, len)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if self.gate == Gate::Rename {
            self.hold_if_checkpoint(to);
        }
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn lock(&self, path: &Path) -> io::Result<Box<dyn StorageLock>> {
        self.inner.lock(path)
    }
}

/// A store whose maintenance thread checkpoints every 4 KiB of log and whose writes wait
/// past 8 KiB, with the first checkpoint held at its rename until the test lets it go.
fn tail_limited_store(fs: &FaultyStorage) -> (Store, mpsc::Receiver<()>, mpsc::Sender<()>) {
    let (gated, reached, release) = GatedStorage::new(fs, Gate::Rename);
    let mut options = small_options(fs, 1000)
        .storage(gated)
        .maintenance_thread(true);
    options.checkpoint_bytes = 4096;
    options.log_tail_limit = 8192;
    (Store::open(DIR, options).unwrap(), reached, release)
}

/// Stores 400 notes (~50 KiB of log), then says so.
fn tail_writer(store: &Store, done: mpsc::Sender<()>) {
    for i in 0..400 {
        store_note(store, i, &format!("note {i} of a long log tail"));
    }
    done.send(()).unwrap();
}

/// Runs `tail_writer` until it waits at the limit, with the first checkpoint held; then
/// `let_go`, which must end the wait within 3 s.
fn writes_held_at_the_limit(store: &Store, reached: &mpsc::Receiver<()>, let_go: impl FnOnce()) {
    std::thread::scope(|s| {
        let (done_tx, done) = mpsc::channel();
        s.spawn(move || tail_writer(store, done_tx));
        reached
            .recv_timeout(Duration::from_secs(10))
            .expect("a checkpoint fell due and holds at its rename");
        assert!(
            done.recv_timeout(Duration::from_millis(500)).is_err(),
            "the writes went on past the limit"
        );
        let held = store.stats().memories;
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(store.stats().memories, held, "a write went through");
        assert!(held < 400 && held > 30, "{held} stored before the wait");
        let_go();
        done.recv_timeout(Duration::from_secs(3))
            .expect("the waiting writes were let go");
    });
}

/// `docs/durability.md`, "Maintenance": a bounded log tail.
#[test]
fn writes_wait_at_the_log_tail_limit_until_the_checkpoint_finishes() {
    let fs = FaultyStorage::new();
    let (store, reached, release) = tail_limited_store(&fs);
    writes_held_at_the_limit(&store, &reached, || release.send(()).unwrap());
    let stats = store.stats();
    assert_eq!(stats.memories, 400);
    assert!(stats.maintenance.checkpoints >= 1);
    assert!(stats.maintenance.writes_waited >= 1);
    assert!(
        (0.5..5.0).contains(&stats.maintenance.longest_write_wait),
        "{}",
        stats.maintenance.longest_write_wait
    );
}

#[test]
fn pausing_maintenance_lets_the_writes_waiting_at_the_log_tail_limit_go() {
    let fs = FaultyStorage::new();
    let (store, reached, release) = tail_limited_store(&fs);
    writes_held_at_the_limit(&store, &reached, || store.pause_maintenance(true));
    // Paused, the thread starts no checkpoint: no later write waited for one.
    let m = store.stats().maintenance;
    assert_eq!(m.writes_waited, 1, "only the write at the limit waited");
    assert_eq!(m.checkpoints, 0, "the held checkpoint has not finished");
    release.send(()).unwrap();
    wait_for_a_checkpoint(&store);
    assert_eq!(store.stats().memories, 400);
}

/// A full disk holds automatic checkpoints off (`DiskFull`): writes past the limit do not
/// wait for a checkpoint that cannot run.
#[test]
fn writes_past_the_log_tail_limit_do_not_wait_while_a_full_disk_holds_checkpoints_off() {
    let fs = FaultyStorage::new();
    let mut options = small_options(&fs, 1000).maintenance_thread(true);
    options.checkpoint_bytes = 4096;
    options.log_tail_limit = 8192;
    let store = Store::open(DIR, options).unwrap();
    // Paused, no checkpoint takes the tail, and no write waits: ~25 KiB of log.
    store.pause_maintenance(true);
    for i in 0..200 {
        store_note(&store, i, &format!("note {i} before the disk fills"));
    }
    // Room for a few more frames, not for the checkpoint of 200 records.
    fs.set_capacity(Some(fs.used_bytes() + 6000));
    store.pause_maintenance(false);
    wait_for_maintenance(&store, "checkpoint failure for the full disk", |m| {
        m.failures > 0
    });
    let start = Instant::now();
    for i in 200..220 {
        store_note(&store, i, &format!("note {i} on a full disk"));
    }
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    let m = store.stats().maintenance;
    assert_eq!(m.writes_waited, 0, "{m:?}");
    assert!(
        m.last_error.as_ref().is_some_and(|e| e.contains("disk")),
        "{:?}",
        m.last_error
    );
}

#[test]
fn a_write_waits_for_a_checkpoint_slower_than_five_seconds_once() {
    let fs = FaultyStorage::new();
    let (store, reached, release) = tail_limited_store(&fs);
    std::thread::scope(|s| {
        let (done_tx, done) = mpsc::channel();
        let store = &store;
        s.spawn(move || tail_writer(store, done_tx));
        reached.recv_timeout(Duration::from_secs(10)).unwrap();
        let held = Instant::now();
        done.recv_timeout(Duration::from_secs(30))
            .expect("the writes go on after one wait");
        assert!(held.elapsed() >= Duration::from_millis(4500));
        assert_eq!(store.stats().maintenance.checkpoints, 0, "still held");
        release.send(()).unwrap();
    });
    let m = store.stats().maintenance;
    assert_eq!(
        m.writes_waited, 1,
        "after the wait timed out, no write waited"
    );
    assert!(m.longest_write_wait >= 4.9, "{}", m.longest_write_wait);
    assert_eq!(store.stats().memories, 400);
}

#[test]
fn writes_and_searches_go_on_while_a_checkpoint_writes_its_files() {
    let fs = FaultyStorage::new();
    let (gated, reached, release) = GatedStorage::new(&fs, Gate::Rename);
    let options = small_options(&fs, 1000).storage(gated);
    let store = Store::open(DIR, options).unwrap();
    for i in 0..50 {
        store_note(&store, i, &format!("before the checkpoint {i}"));
    }
    std::thread::scope(|s| {
        let checkpoint = s.spawn(|| store.checkpoint());
        // The checkpoint has captured (rows frozen, log rotated) and waits at its rename,
        // holding no lock a writer needs.
        reached.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        let store = &store;
        s.spawn(move || {
            for i in 50..80 {
                store_note(store, i, &format!("during the checkpoint {i}"));
            }
            let hits = store
                .search(&SearchRequest::new("during the checkpoint 60"))
                .unwrap();
            done_tx
                .send((hits.count, store.stats().checkpoint_seq))
                .unwrap();
        });
        // A writer that waited for the checkpoint would never finish: give it a minute.
        let answered = done.recv_timeout(Duration::from_secs(60));
        release.send(()).unwrap();
        let (count, checkpoint_seq) =
            answered.expect("writes and searches wait for no checkpoint file");
        assert!(count > 0);
        assert_eq!(checkpoint_seq, 0, "not committed yet");
        checkpoint.join().unwrap().unwrap();
    });
    let stats = store.stats();
    assert_eq!(stats.memories, 80);
    assert_eq!(stats.maintenance.checkpoints, 1);
    let run = stats.maintenance.last.expect("the checkpoint is reported");
    assert_eq!(run.sealed_rows, 50, "it sealed the rows it captured");
    assert!(stats.checkpoint_seq >= 50 && stats.checkpoint_seq < stats.last_seq);
    assert_eq!(
        stats.growing_rows, 30,
        "the writes during it are in the growing rows"
    );
    drop(store);
    // The checkpoint covers the first 50; the log after it the 30 written during it.
    let reopened = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    assert_eq!(reopened.stats().memories, 80);
}

#[test]
fn writes_go_on_while_a_purge_reads_its_checkpoint_back() {
    let fs = FaultyStorage::new();
    let (gated, reached, release) = GatedStorage::new(&fs, Gate::Read);
    let store = Store::open(DIR, small_options(&fs, 1000).storage(gated)).unwrap();
    let ids: Vec<MemoryId> = (0..40)
        .map(|i| store_note(&store, i, &format!("before the purge {i}")))
        .collect();
    for id in &ids[..10] {
        store.delete(*id).unwrap();
    }
    std::thread::scope(|s| {
        let purge = s.spawn(|| store.purge());
        // P4's checkpoint is written; P5 reads it back, holding no lock a writer needs.
        reached.recv().unwrap();
        let (done_tx, done) = mpsc::channel();
        let store = &store;
        s.spawn(move || {
            for i in 40..60 {
                store_note(store, i, &format!("during the purge {i}"));
            }
            done_tx.send(store.stats().memories).unwrap();
        });
        // A writer that waited for the read-back would never finish: give it a minute.
        let answered = done.recv_timeout(Duration::from_secs(60));
        release.send(()).unwrap();
        let memories = answered.expect("writes wait for no purge's read-back");
        assert_eq!(memories, 50);
        let purge = purge.join().unwrap().unwrap();
        assert_eq!(purge.rows_dropped, 0, "the deleted rows were never sealed");
    });
    drop(store);
    let reopened = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    assert_eq!(reopened.stats().memories, 50);
    assert_eq!(files(&fs, "ckpt-").len(), 1, "the purge's checkpoint alone");
}

#[test]
fn a_reembedding_switches_only_between_checkpoints() {
    use amberdb::{Embedder, HashingEmbedder};
    let new = || -> Arc<dyn Embedder> { Arc::new(HashingEmbedder::with_dim(40)) };
    let fs = FaultyStorage::new();
    let (gated, reached, release) = GatedStorage::new(&fs, Gate::Rename);
    let store = Store::open(DIR, small_options(&fs, 1000).storage(gated)).unwrap();
    for i in 0..40 {
        store
            .store(NewMemory::new(format!("before the switch {i}")))
            .unwrap();
    }
    std::thread::scope(|s| {
        let checkpoint = s.spawn(|| store.checkpoint());
        // Captured (the 40 growing rows are in its segment), its files being written.
        reached.recv().unwrap();
        let reembed = s.spawn(|| store.reembed(new()));
        // A switch inside the checkpoint would land within a second; none may.
        let start = Instant::now();
        let mut switched_inside = false;
        while start.elapsed() < Duration::from_secs(1) && !switched_inside {
            switched_inside = store.embedder_id() == new().model_id();
            std::thread::sleep(Duration::from_millis(10));
        }
        release.send(()).unwrap();
        let checkpointed = checkpoint.join().unwrap();
        let reembedded = reembed.join().unwrap();
        assert!(
            !switched_inside,
            "the switch landed while a checkpoint was between its capture and its finish; the checkpoint then returned {checkpointed:?}"
        );
        checkpointed.unwrap();
        reembedded.unwrap();
    });
    let cause = store.stats().poison_cause;
    assert!(cause.is_none(), "{cause:?}");
    let after = store
        .store(NewMemory::new("after the switch"))
        .unwrap()
        .memory_id;
    store.checkpoint().unwrap();
    let memories = store.list_recent(None, 50).unwrap();
    assert_eq!(memories.len(), 41);
    for m in &memories {
        assert_eq!(
            store.vector(m.id).unwrap(),
            new().embed(&m.content).unwrap()
        );
    }
    drop(store);
    let mut options = small_options(&fs, 1000);
    options.embedder = new();
    let reopened = Store::open(DIR, options).unwrap();
    assert_eq!(reopened.stats().memories, 41);
    assert_eq!(
        reopened.vector(after).unwrap(),
        new().embed("after the switch").unwrap()
    );
}

/// Waits (up to a minute, for a loaded CI machine) until the maintenance thread wrote a
/// checkpoint.
fn wait_for_a_checkpoint(store: &Store) {
    wait_for_maintenance(store, "a checkpoint", |m| m.checkpoints > 0);
}

/// Waits (up to a minute) until the maintenance counters show `what`.
fn wait_for_maintenance(
    store: &Store,
    what: &str,
    done: impl Fn(&amberdb::MaintenanceCounters) -> bool,
) {
    let start = Instant::now();
    while !done(&store.stats().maintenance) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no {what}: {:?}",
            store.stats().maintenance
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_maintenance_thread_checkpoints_without_being_asked() {
    let fs = FaultyStorage::new();
    let options = small_options(&fs, 20).maintenance_thread(true);
    let store = Store::open(DIR, options).unwrap();
    assert!(store.stats().maintenance.thread);
    for i in 0..25 {
        store_note(&store, i, &format!("note {i}"));
    }
    // No write ran it: the thread did.
    wait_for_a_checkpoint(&store);
    let stats = store.stats();
    assert!(stats.checkpoint_seq >= 20, "{stats:?}");
    assert_eq!(stats.maintenance.failures, 0);
    drop(store);
    assert_eq!(
        Store::open(DIR, small_options(&fs, 20))
            .unwrap()
            .stats()
            .memories,
        25
    );
}

/// A crash leaves a log tail past `checkpoint_bytes`: the open counts it, and the
/// maintenance thread checkpoints it with no write to find it due (the next open after
/// another crash replays less).
#[test]
fn a_tail_past_checkpoint_bytes_after_a_crash_is_checkpointed_at_open_without_a_write() {
    let fs = FaultyStorage::new();
    let mut options = small_options(&fs, 1000);
    options.checkpoint_bytes = u64::MAX;
    let store = Store::open(DIR, options.clone()).unwrap();
    for i in 0..30 {
        store_note(&store, i, &format!("note {i}"));
    }
    // Nothing checkpointed the 30 frames; the crash keeps the log as it is.
    assert_eq!(store.stats().checkpoint_seq, 0);
    let image = fs.crash_image(amberdb::storage::CrashImage::DropUnsynced);
    drop(store);
    // Reopened where 4 KiB of log is due: the 30 frames are more.
    options.checkpoint_bytes = 4096;
    let store = Store::open(
        DIR,
        options.maintenance_thread(true).storage(Arc::new(image)),
    )
    .unwrap();
    assert_eq!(store.open_report().replayed_frames, 30);
    wait_for_a_checkpoint(&store);
    assert_eq!(store.stats().checkpoint_seq, 30);
    assert_eq!(store.stats().memories, 30);
}

#[test]
fn retention_keeps_two_checkpoints_and_the_log_from_the_older_one() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    let mut removed_total = 0;
    for round in 0..6u64 {
        for i in 0..10 {
            store_note(&store, round * 10 + i, &format!("round {round} note {i}"));
        }
        store.checkpoint().unwrap();
        let checkpoints = files(&fs, "ckpt-");
        let logs = files(&fs, "wal-");
        assert!(checkpoints.len() <= 2, "{checkpoints:?}");
        if checkpoints.len() == 1 {
            // One checkpoint: the whole log is its fallback.
            assert_eq!(seq_of(&logs[0]), 1, "{logs:?}");
            continue;
        }
        let older = seq_of(&checkpoints[0]);
        // Every log file left holds a frame after the older checkpoint, and one starts right
        // after it (R5 needs it).
        assert!(
            logs.iter().any(|l| seq_of(l) == older + 1),
            "{logs:?} {checkpoints:?}"
        );
        assert!(
            logs.iter().all(|l| seq_of(l) > older),
            "round {round}: {logs:?} kept before {older}"
        );
        removed_total = store.stats().maintenance.removed.files;
    }
    assert!(
        removed_total >= 8,
        "4 checkpoints and 4 log files went: {removed_total}"
    );
    drop(store);
    assert_eq!(
        Store::open(DIR, small_options(&fs, 1000))
            .unwrap()
            .stats()
            .memories,
        60
    );
}

#[test]
fn a_damaged_newest_checkpoint_falls_back_to_the_older_and_two_refuse_to_open() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    for round in 0..4u64 {
        for i in 0..10 {
            store_note(&store, round * 10 + i, &format!("round {round} note {i}"));
        }
        store.checkpoint().unwrap();
    }
    for i in 40..45 {
        store_note(&store, i, &format!("after the last checkpoint {i}"));
    }
    drop(store);
    let checkpoints = files(&fs, "ckpt-");
    assert_eq!(checkpoints.len(), 2);
    let damage = |name: &str| {
        let path = Path::new(DIR).join(name);
        let mut bytes = fs.read(&path).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0x40;
        fs.overwrite(&path, bytes).unwrap();
    };
    damage(&checkpoints[1]);
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    assert_eq!(store.open_report().skipped_checkpoints.len(), 1);
    assert_eq!(store.stats().memories, 45, "rebuilt from the older one");
    drop(store);
    damage(&checkpoints[0]);
    match Store::open(DIR, small_options(&fs, 1000)) {
        Err(EngineError::Kernel(KernelError::Corrupted { file, .. })) => {
            assert!(
                file.to_string_lossy().contains("wal-"),
                "names the log file retention let go: {}",
                file.display()
            );
        }
        Err(e) => panic!("expected Corrupted, got {e}"),
        Ok(s) => panic!(
            "opened with {} memories instead of refusing",
            s.stats().memories
        ),
    }
}

#[test]
fn deleted_texts_leave_the_log_and_checkpoints_after_two_checkpoints() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    let secrets: Vec<String> = (0..20).map(|i| format!("secret-{i:03}-zqx")).collect();
    let ids: Vec<MemoryId> = secrets
        .iter()
        .enumerate()
        .map(|(i, s)| store_note(&store, i as u64, s))
        .collect();
    store_note(&store, 99, "a note that stays");
    store.checkpoint().unwrap();
    for id in ids {
        store.delete(id).unwrap();
    }
    store.checkpoint().unwrap();
    store_note(&store, 98, "another note that stays");
    store.checkpoint().unwrap();
    let leaked: Vec<String> = fs
        .list(Path::new(DIR))
        .unwrap()
        .into_iter()
        .filter(|name| !name.starts_with("seg-"))
        .filter(|name| {
            let bytes = fs.read(&Path::new(DIR).join(name)).unwrap();
            bytes.windows(6).any(|w| w == b"secret")
        })
        .collect();
    assert!(leaked.is_empty(), "deleted texts still in {leaked:?}");
    assert_eq!(store.stats().memories, 2);
}

/// A vector no other row has, with components whose f32 bytes are easy to look for.
fn marked(i: u64) -> Vec<f32> {
    let mut v = [0.0f32; 8];
    v[(i % 8) as usize] = 0.75 + i as f32 / 4096.0;
    v[((i + 3) % 8) as usize] = 0.5;
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter().map(|x| x / n).collect()
}

fn bytes_of(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_purge_removes_deleted_texts_vectors_and_tags_from_every_file() {
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    let mut secrets = Vec::new();
    let mut kept = Vec::new();
    // Every third row a secret, and all of rows 40..50, a segment of their own.
    let secret = |i: u64| i.is_multiple_of(3) || (40..50).contains(&i);
    for i in 0..60u64 {
        let text = if secret(i) {
            format!("secret-{i:03}-zqx")
        } else {
            format!("kept note {i}")
        };
        // A secret's tag is as personal as its text; a tag kept rows use too stays.
        let tags: Vec<String> = if secret(i) {
            vec![format!("secret-tag-{i:03}"), "shared".into()]
        } else {
            vec!["shared".into()]
        };
        let id = store
            .store(StoreRequest {
                memory: NewMemory::new(&text).tags(tags),
                vector: Some(marked(i)),
                // The tags hook registers canonical tags (with their vectors).
                hooks: amberdb::HookOverrides {
                    force: vec![amberdb::WriteHook::Tags],
                    ..amberdb::HookOverrides::default()
                },
            })
            .unwrap()
            .memory_id;
        if secret(i) {
            secrets.push((id, marked(i)));
        } else {
            kept.push((id, text));
        }
        // Three sealed segments, and rows still growing.
        if i == 19 || i == 39 || i == 49 {
            store.checkpoint().unwrap();
        }
    }
    for (id, _) in &secrets {
        store.delete(*id).unwrap();
    }
    // Two segments rewritten, the third (every row deleted) dropped; the growing secrets were
    // never in a segment.
    let purge = store.purge().unwrap();
    assert_eq!(purge.rows_dropped, 14 + 10, "{purge:?}");
    assert_eq!(purge.segments_rewritten, 3, "{purge:?}");
    assert_eq!(
        store.stats().sealed_segments,
        3,
        "two rewritten, one new from the growing rows"
    );
    assert!(purge.removed.files > 0, "{purge:?}");
    assert!(purge.tags_forgotten > 0, "{purge:?}");
    assert_eq!(store.canonical_tags(None).unwrap(), ["shared"]);
    let leaks = |fs: &FaultyStorage| -> Vec<String> {
        fs.list(Path::new(DIR))
            .unwrap()
            .into_iter()
            .filter(|name| {
                let bytes = fs.read(&Path::new(DIR).join(name)).unwrap();
                bytes.windows(6).any(|w| w == b"secret")
                    || secrets.iter().any(|(_, v)| {
                        let needle = bytes_of(v);
                        bytes.windows(needle.len()).any(|w| w == needle.as_slice())
                    })
            })
            .collect()
    };
    assert!(
        leaks(&fs).is_empty(),
        "deleted data still in {:?}",
        leaks(&fs)
    );
    assert_eq!(
        files(&fs, "ckpt-").len(),
        1,
        "one checkpoint until the next"
    );
    // Everything kept is there and searchable, before and after a reopen.
    let check = |s: &Store| {
        assert_eq!(s.stats().memories, kept.len());
        for (id, text) in &kept {
            assert_eq!(&s.get(*id).unwrap().content, text);
        }
        for (id, _) in &secrets {
            assert!(s.get(*id).is_err());
        }
        assert!(s.search(&SearchRequest::new("kept note 7")).unwrap().count > 0);
    };
    check(&store);
    drop(store);
    let reopened = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    check(&reopened);
    assert_eq!(reopened.canonical_tags(None).unwrap(), ["shared"]);
    drop(reopened);
    // The next checkpoint brings back two, and the store goes on.
    let s = Store::open(DIR, small_options(&fs, 1000)).unwrap();
    store_note(&s, 1, "after the purge");
    s.checkpoint().unwrap();
    assert_eq!(files(&fs, "ckpt-").len(), 2);
    assert!(leaks(&fs).is_empty());
}

#[test]
fn a_power_cut_at_any_sync_point_of_a_purge_loses_nothing_and_resurrects_nothing() {
    // The store before the purge: two sealed segments and growing rows, every third deleted.
    let prepare = |fs: &FaultyStorage| -> (Store, Vec<(MemoryId, String)>, Vec<MemoryId>) {
        let store = Store::open(DIR, small_options(fs, 1000)).unwrap();
        let (mut kept, mut deleted) = (Vec::new(), Vec::new());
        for i in 0..30u64 {
            let text = format!("note {i}");
            let id = store
                .store(StoreRequest::new(NewMemory::new(&text)).with_vector(marked(i)))
                .unwrap()
                .memory_id;
            if i % 3 == 0 {
                deleted.push(id);
            } else {
                kept.push((id, text));
            }
            if i == 9 || i == 19 {
                store.checkpoint().unwrap();
            }
        }
        for id in &deleted {
            store.delete(*id).unwrap();
        }
        (store, kept, deleted)
    };
    let clean = FaultyStorage::new();
    let (store, _, _) = prepare(&clean);
    let before = clean.syncs();
    store.purge().unwrap();
    let sync_points = clean.syncs() - before;
    drop(store);
    assert!(sync_points >= 8, "{sync_points} sync points");
    eprintln!("a purge: {sync_points} sync points x 3 crash images, each reopened and checked");
    for k in 1..=sync_points {
        for image in super::support::crash_images(k) {
            let fs = FaultyStorage::new();
            let (store, kept, deleted) = prepare(&fs);
            fs.crash_at_sync(k);
            let _ = store.purge();
            assert!(fs.crashed(), "sync point {k} never reached");
            drop(store);
            let after = fs.crash_image(image);
            let reopened = Store::open(DIR, small_options(&after, 1000))
                .unwrap_or_else(|e| panic!("sync point {k}, {image:?}: {e}"));
            assert_eq!(
                reopened.stats().memories,
                kept.len(),
                "sync point {k}, {image:?}"
            );
            for (id, text) in &kept {
                assert_eq!(&reopened.get(*id).unwrap().content, text);
            }
            for id in &deleted {
                assert!(reopened.get(*id).is_err(), "sync point {k}: {id} came back");
            }
            // It writes and purges again.
            store_note(&reopened, 99, "after the cut");
            reopened.purge().unwrap();
        }
    }
}

#[test]
fn purges_checkpoints_and_writers_together_lose_nothing() {
    let seed = super::support::seed("purges_checkpoints_and_writers_together", 11);
    let fs = FaultyStorage::new();
    let store = Store::open(DIR, small_options(&fs, 40).maintenance_thread(true)).unwrap();
    let model: Mutex<std::collections::BTreeMap<MemoryId, String>> = Mutex::default();
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut rng = super::support::Rng::new(seed);
            for i in 0..600u64 {
                let text = format!("concurrent note {i}");
                let id = store
                    .store(StoreRequest::new(NewMemory::new(&text)).with_vector(marked(i)))
                    .unwrap()
                    .memory_id;
                model.lock().unwrap().insert(id, text);
                if rng.below(3) == 0 {
                    let victim = {
                        let m = model.lock().unwrap();
                        let n = m.len() as u64;
                        m.keys().nth(rng.below(n) as usize).copied()
                    };
                    if let Some(victim) = victim {
                        store.delete(victim).unwrap();
                        model.lock().unwrap().remove(&victim);
                    }
                }
            }
        });
        while !writer.is_finished() {
            store.purge().unwrap();
        }
        writer.join().unwrap();
    });
    store.purge().unwrap();
    let model = model.into_inner().unwrap();
    let check = |s: &Store| {
        assert_eq!(s.stats().memories, model.len());
        for (id, text) in &model {
            assert_eq!(&s.get(*id).unwrap().content, text);
        }
        assert_eq!(s.stats().maintenance.failures, 0);
    };
    check(&store);
    drop(store);
    check(&Store::open(DIR, small_options(&fs, 40)).unwrap());
}

#[test]
fn the_maintenance_thread_purges_deletes_after_the_purge_delay_without_being_asked() {
    let fs = FaultyStorage::new();
    let delay = Duration::from_millis(300);
    let store = Store::open(
        DIR,
        small_options(&fs, 1000)
            .maintenance_thread(true)
            .purge_delay(Some(delay)),
    )
    .unwrap();
    let mut doomed = Vec::new();
    for i in 0..30u64 {
        let id = store
            .store(
                StoreRequest::new(NewMemory::new(format!("auto-purge-{i:03} text")))
                    .with_vector(marked(i)),
            )
            .unwrap()
            .memory_id;
        if i % 2 == 0 {
            doomed.push((id, format!("auto-purge-{i:03}"), marked(i)));
        }
        if i == 14 {
            store.checkpoint().unwrap();
        }
    }
    // Without a delete nothing is pending, and nothing is purged.
    std::thread::sleep(delay * 2);
    assert_eq!(store.stats().maintenance.purges, 0);
    assert_eq!(store.stats().maintenance.purge_pending, None);
    let deleted_at = Instant::now();
    for (id, _, _) in &doomed {
        store.delete(*id).unwrap();
    }
    assert!(store.stats().maintenance.purge_pending.is_some());
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats().maintenance.purges == 0 {
        assert!(Instant::now() < deadline, "no purge within 20 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = deleted_at.elapsed();
    assert!(took >= delay, "purged after {took:?}, before the delay");
    let m = store.stats().maintenance;
    eprintln!("purged {took:?} after the deletes: {:?}", m.last_purge);
    assert_eq!(m.purge_pending, None);
    assert_eq!(
        m.last_purge.unwrap().rows_dropped,
        8,
        "the sealed rows deleted"
    );
    // No file holds a deleted text or vector; the kept ones are still there.
    let everything: Vec<u8> = fs
        .list(Path::new(DIR))
        .unwrap()
        .iter()
        .flat_map(|name| fs.read(&Path::new(DIR).join(name)).unwrap())
        .collect();
    let holds = |needle: &[u8]| everything.windows(needle.len()).any(|w| w == needle);
    for (_, text, vector) in &doomed {
        assert!(!holds(text.as_bytes()), "{text} is still on disk");
        assert!(
            !holds(&bytes_of(vector)),
            "the vector of {text} is still on disk"
        );
    }
    assert!(holds(b"auto-purge-001"));
    assert_eq!(store.stats().memories, 15);
}

#[test]
fn a_delete_not_purged_before_a_restart_is_purged_after_it() {
    let fs = FaultyStorage::new();
    let delay = Duration::from_millis(200);
    let options = || {
        small_options(&fs, 1000)
            .maintenance_thread(true)
            .purge_delay(Some(delay))
    };
    let store = Store::open(DIR, options().purge_delay(None)).unwrap();
    let doomed = store_note(&store, 1, "restart-doomed-note");
    store_note(&store, 2, "restart-kept-note");
    store.checkpoint().unwrap();
    store.delete(doomed).unwrap();
    // Closed before any purge: the note of the delete is in memory only.
    drop(store);
    let store = Store::open(DIR, options()).unwrap();
    assert!(store.stats().maintenance.purge_pending.is_some());
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.stats().maintenance.purges == 0 {
        assert!(
            Instant::now() < deadline,
            "no purge within 20 s of the reopen"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    for name in fs.list(Path::new(DIR)).unwrap() {
        let bytes = fs.read(&Path::new(DIR).join(&name)).unwrap();
        assert!(
            !bytes.windows(14).any(|w| w == b"restart-doomed"),
            "{name} still holds the deleted text"
        );
    }
    assert_eq!(store.stats().memories, 1);
}

#[test]
fn paused_maintenance_waits_and_resumed_it_catches_up() {
    let fs = FaultyStorage::new();
    let options = small_options(&fs, 20)
        .maintenance_thread(true)
        .purge_delay(Some(Duration::from_millis(50)));
    let store = Store::open(DIR, options).unwrap();
    store.pause_maintenance(true);
    assert!(store.stats().maintenance.paused);
    let ids: Vec<MemoryId> = (0..25)
        .map(|i| store_note(&store, i, &format!("paused note {i}")))
        .collect();
    store.delete(ids[0]).unwrap();
    // Due work waits: three wake-ups of the thread pass with nothing done.
    std::thread::sleep(Duration::from_millis(3_000));
    let m = store.stats().maintenance;
    assert_eq!((m.checkpoints, m.purges), (0, 0), "{m:?}");
    assert!(m.purge_pending.is_some());
    // Asked for, it still runs.
    store.checkpoint().unwrap();
    assert_eq!(store.stats().maintenance.checkpoints, 1);
    store_note(&store, 99, "one more");
    store.pause_maintenance(false);
    let start = Instant::now();
    while store.stats().maintenance.purges == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no purge after resuming"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let m = store.stats().maintenance;
    assert!(!m.paused);
    assert_eq!(m.purge_pending, None);
    assert_eq!(store.stats().memories, 25);
}

/// The lines of this process's memory maps that name `path` (an unlinked file's line ends
/// in " (deleted)", and still names it).
fn maps_of(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let name = path.to_str().unwrap();
    maps.lines().filter(|l| l.contains(name)).count()
}

/// A store on the real file system (so its files are mapped), with maintenance left to the
/// test.
fn on_disk() -> amberdb::StoreOptions {
    amberdb::StoreOptions::new(Arc::new(amberdb::HashingEmbedder::with_dim(8)))
        .maintenance_thread(false)
        .purge_delay(None)
}

/// The checkpoint files in `dir`, in sequence order.
fn checkpoint_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "ckpt"))
        .collect();
    names.sort();
    names
}

/// Records an open loads stay in the checkpoint it mapped and are decoded when read
/// (`docs/architecture.md`, "Mapped records"): every record reads back as it was written, is
/// changed and deleted as usual, and once a checkpoint has brought them into memory and a
/// purge has removed the old checkpoint, no map of this process keeps that file (and the
/// deleted text in it) on the disk.
#[test]
fn records_left_in_the_mapped_checkpoint_read_back_and_let_the_file_go() {
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<amberdb::Memory> = {
        let store = Store::open(dir.path(), on_disk()).unwrap();
        let ids: Vec<MemoryId> = (0..300)
            .map(|i| store_note(&store, i, &format!("note {i}: the mapped record kept")))
            .collect();
        store.checkpoint().unwrap();
        let written = ids.iter().map(|id| store.get(*id).unwrap()).collect();
        store.close().unwrap();
        written
    };
    let [checkpoint] = <[_; 1]>::try_from(checkpoint_files(dir.path())).unwrap();
    assert_eq!(maps_of(&checkpoint), 0, "the closed store mapped nothing");

    let store = Store::open(dir.path(), on_disk()).unwrap();
    assert!(
        maps_of(&checkpoint) > 0,
        "the open keeps the checkpoint mapped for its records"
    );
    for m in &written {
        assert_eq!(&store.get(m.id).unwrap(), m, "record {} reads back", m.id);
    }
    let (changed, gone) = (written[1].id, written[0].id);
    store
        .update(amberdb::UpdateRequest {
            memory_id: Some(changed),
            tags: Some(vec!["fresh".into()]),
            ..amberdb::UpdateRequest::default()
        })
        .unwrap();
    store.delete(gone).unwrap();
    assert_eq!(store.get(changed).unwrap().tags, ["fresh"]);
    while !store.lexical_ready() {
        std::thread::sleep(Duration::from_millis(5));
    }
    store.purge().unwrap();
    assert!(!checkpoint.exists(), "the purge removed the old checkpoint");
    assert_eq!(
        maps_of(&checkpoint),
        0,
        "no map keeps the removed checkpoint's blocks (and its deleted text) on the disk"
    );
    for m in &written[2..] {
        assert_eq!(
            &store.get(m.id).unwrap(),
            m,
            "record {} after the purge",
            m.id
        );
    }
    assert!(store.get(gone).is_err());
    store.close().unwrap();

    let store = Store::open(dir.path(), on_disk()).unwrap();
    assert!(store.get(gone).is_err(), "the delete stands after a reopen");
    assert_eq!(store.get(changed).unwrap().tags, ["fresh"]);
    for m in &written[2..] {
        assert_eq!(
            &store.get(m.id).unwrap(),
            m,
            "record {} after a reopen",
            m.id
        );
    }
}

/// An open from a delta leaves records in the base and in the delta; the next delta makes
/// retention remove the older delta, so its records come into memory first, and those of the
/// base, which stays, are left where they are.
#[test]
fn the_next_delta_lets_the_loaded_delta_go_and_keeps_the_base_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<amberdb::Memory> = {
        let store = Store::open(dir.path(), on_disk()).unwrap();
        let mut ids: Vec<MemoryId> = (0..200)
            .map(|i| store_note(&store, i, &format!("base note {i}")))
            .collect();
        store.checkpoint().unwrap();
        ids.extend((200..210).map(|i| store_note(&store, i, &format!("delta note {i}"))));
        store.checkpoint().unwrap();
        let written = ids.iter().map(|id| store.get(*id).unwrap()).collect();
        store.close().unwrap();
        written
    };
    let [base, delta] = <[_; 2]>::try_from(checkpoint_files(dir.path())).unwrap();
    let store = Store::open(dir.path(), on_disk()).unwrap();
    assert_eq!(
        store.open_report().checkpoint_delta_of,
        Some(seq_of(base.file_name().unwrap().to_str().unwrap())),
        "opened from the delta"
    );
    assert!(
        maps_of(&base) > 0 && maps_of(&delta) > 0,
        "both keep records"
    );
    store_note(&store, 999, "after the open");
    store.checkpoint().unwrap();
    assert!(
        !delta.exists() && base.exists(),
        "{:?}",
        checkpoint_files(dir.path())
    );
    assert_eq!(maps_of(&delta), 0, "the removed delta is mapped no more");
    assert!(maps_of(&base) > 0, "the base still holds its records");
    store.close().unwrap();
    // A full checkpoint copies the records no one read as their bytes; a reopen from it
    // gives every record back.
    let store = Store::open(dir.path(), on_disk().delta_max_share(0.0)).unwrap();
    store_note(&store, 1000, "before a full checkpoint");
    store.checkpoint().unwrap();
    store.close().unwrap();
    let store = Store::open(dir.path(), on_disk()).unwrap();
    assert_eq!(store.open_report().checkpoint_delta_of, None, "a full one");
    for m in &written {
        assert_eq!(&store.get(m.id).unwrap(), m, "record {}", m.id);
    }
}
