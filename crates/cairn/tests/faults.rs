//! Failure behaviour under injected faults, on the simulated file system.
//!
//! - **No swallowed errors** (`noisy_faults_are_never_swallowed`): random sequences of every
//!   public operation, each run with or without a seeded plan of noisy faults (errors and torn
//!   writes on any primitive). An operation that saw a noisy fault must return an error; an
//!   operation that returns an error must have seen one; after an error the session is closed and
//!   opened again, and every snapshot completely saved before is listed and opens with exactly its
//!   contents. Half of the errors are followed instead by going on in the same session: every
//!   live table must then answer exactly as before the failed operation, or refuse with
//!   `TableBroken`.
//! - **Power loss** (`power_loss_keeps_snapshots_whole`): the power is cut at a random primitive
//!   of a random sequence (unsynced directory entries and file tails are lost or torn); the
//!   session directory must open, every snapshot whose save returned is there, complete and
//!   correct, and no snapshot is ever partial.
//! - **Silent corruption** (`silent_write_faults_in_snapshots_are_detected`): appends made while
//!   saving, exporting or importing snapshots may silently write a prefix or junk; opening such a
//!   snapshot must fail with `SnapshotCorrupted`, and any snapshot that opens has exactly its
//!   contents.
//!
//! Cases: `CAIRN_FAULT_CASES` (default 1000), `CAIRN_POWER_LOSS_CASES` (default 500),
//! `CAIRN_SILENT_CASES` (default 300).

mod common;

use cairn::fs::{FaultPlan, FsOp, MemFs};
use cairn::{Error, SnapshotOverrides, TableConfig};
use common::ledger::{check_table, config_strategy, op_strategy, Op, World, LABEL};
use proptest::prelude::*;

fn cases(var: &str, default: u32) -> u32 {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A step: an operation, the seed and percentage of the noisy faults injected into it, and
/// whether an error is followed by a restart of the session (or by going on with it).
type Step = (Op, Option<(u64, u8)>, bool);

fn step_strategy() -> impl Strategy<Value = Step> {
    (
        op_strategy(),
        prop_oneof![
            2 => Just(None),
            1 => (any::<u64>(), 1u8..=30).prop_map(Some),
        ],
        any::<bool>(),
    )
}

fn noisy_case(config: TableConfig, steps: &[Step]) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    let mut world = World::new(fs.clone(), config);
    let (mut errors, mut faults, mut broken) = (0, 0, 0);
    for (i, (op, fault, restart)) in steps.iter().enumerate() {
        if matches!(op, Op::Restart) {
            // Closing reports nothing (it removes what it can and leaves the rest queued), so
            // only the opening half of a restart runs under the fault plan.
            world.close_all();
        }
        fs.set_fault_plan(fault.map(|(seed, p)| FaultPlan::noisy(seed, f64::from(p) / 100.0)));
        let result = world.step(op);
        fs.set_fault_plan(None);
        let injected = fs.take_injected();
        let noisy: Vec<_> = injected.iter().filter(|f| f.kind.is_noisy()).collect();
        faults += noisy.len();
        let result = result.map_err(|e| {
            TestCaseError::fail(format!("step {i} {op:?}: {e} (faults injected: {noisy:?})"))
        })?;
        match result {
            // Closing a table removes files where it can; a failure leaves them queued for the
            // next operation, which reports it.
            Ok(()) if matches!(op, Op::CloseOldest) => {}
            Ok(()) => prop_assert!(
                noisy.is_empty(),
                "step {} {:?} succeeded but these faults were injected: {:?}",
                i,
                op,
                noisy
            ),
            Err(e) => {
                errors += 1;
                prop_assert!(
                    !noisy.is_empty(),
                    "step {} {:?} failed without an injected fault: {}",
                    i,
                    op,
                    e
                );
                // A failed snapshot operation, or a failed restart, is settled by a restart.
                if *restart || world.uncertain.is_some() || world.session.is_none() {
                    world.restore_and_verify()?;
                } else {
                    broken += world.check_after_error()?;
                }
            }
        }
    }
    world.restore_and_verify()?;
    if std::env::var_os("CAIRN_FAULT_TRACE").is_some() {
        eprintln!(
            "{} steps, {faults} faults, {errors} errors, {broken} tables broken",
            steps.len()
        );
    }
    Ok(())
}

fn power_loss_case(
    config: TableConfig,
    ops: &[Op],
    crash_fraction: f64,
    seed: u64,
) -> Result<(), TestCaseError> {
    // A dry run counts the primitives, so that the power is cut somewhere inside the sequence.
    let dry = MemFs::new();
    let mut world = World::new(dry.clone(), config.clone());
    let start = dry.op_count();
    for op in ops {
        world
            .step(op)?
            .map_err(|e| TestCaseError::fail(format!("dry run: {e}")))?;
    }
    let total = dry.op_count() - start;
    drop(world);

    let fs = MemFs::new();
    let mut world = World::new(fs.clone(), config);
    fs.crash_after((total as f64 * crash_fraction) as u64);
    let mut in_flight = None;
    for (i, op) in ops.iter().enumerate() {
        let result = world.step(op)?;
        if fs.is_crashed() {
            in_flight = Some(op);
            break;
        }
        if let Err(e) = result {
            return Err(TestCaseError::fail(format!("step {i} {op:?}: {e}")));
        }
    }
    fs.cut_power();
    world.close_all();
    let report = fs.recover(seed);
    let verified = world.restore_and_verify()?;
    if std::env::var_os("CAIRN_FAULT_TRACE").is_some() {
        eprintln!("power lost during {in_flight:?}: {report:?}, {verified} snapshots verified");
    }
    Ok(())
}

fn silent_case(config: TableConfig, ops: &[Op], seed: u64) -> Result<(), TestCaseError> {
    let fs = MemFs::new();
    let mut world = World::new(fs.clone(), config);
    let (mut corrupted_saves, mut detected) = (0, 0);
    for op in ops {
        let writes_snapshot = matches!(op, Op::Save(_) | Op::ExportImport(..));
        if writes_snapshot {
            fs.set_fault_plan(Some(FaultPlan {
                ops: vec![FsOp::Append],
                ..FaultPlan::silent(seed ^ fs.op_count(), 0.2)
            }));
        }
        let result = world.step(op)?;
        fs.set_fault_plan(None);
        let silent = !fs.take_injected().is_empty();
        if let Err(e) = result {
            return Err(TestCaseError::fail(format!("{op:?}: {e}")));
        }
        if writes_snapshot && silent {
            corrupted_saves += 1;
            // The disk lied about this save: drop the snapshot it made (if any) from the model,
            // then check that opening it fails rather than returning wrong data.
            let listed = world.session().list_snapshots().unwrap();
            for name in listed {
                let model = world.snapshots.get(&name).cloned();
                match world
                    .session()
                    .open_snapshot(&name, LABEL, SnapshotOverrides::default())
                {
                    Ok(table) => {
                        let model = model.expect("listed snapshots are in the model");
                        check_table(&table, &model)?
                            .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                    }
                    Err(Error::SnapshotCorrupted { .. }) => {
                        detected += 1;
                        world.snapshots.remove(&name);
                        world.session().delete_snapshot(&name).unwrap();
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("{name}: wrong error {e}"))),
                }
            }
        }
    }
    if std::env::var_os("CAIRN_FAULT_TRACE").is_some() {
        eprintln!("{corrupted_saves} snapshot writes silently corrupted, {detected} detected");
    }
    world.restore_and_verify().map(drop)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases("CAIRN_FAULT_CASES", 1000),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn noisy_faults_are_never_swallowed(
        config in config_strategy(),
        steps in prop::collection::vec(step_strategy(), 1..60),
    ) {
        noisy_case(config, &steps)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases("CAIRN_POWER_LOSS_CASES", 500),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn power_loss_keeps_snapshots_whole(
        config in config_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..60),
        crash_fraction in 0.0f64..1.0,
        seed in any::<u64>(),
    ) {
        power_loss_case(config, &ops, crash_fraction, seed)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases("CAIRN_SILENT_CASES", 300),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn silent_write_faults_in_snapshots_are_detected(
        config in config_strategy(),
        ops in prop::collection::vec(op_strategy(), 1..60),
        seed in any::<u64>(),
    ) {
        silent_case(config, &ops, seed)?;
    }
}
