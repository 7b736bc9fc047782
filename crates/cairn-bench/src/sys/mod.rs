//! The system around the benchmark: memory cgroups and the disk's fio baseline.

pub mod cgroup;
pub mod fio;
