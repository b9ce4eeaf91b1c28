//! `flowplane bench flowcache` (not built yet: owned by the issue that builds the crate).

use super::CommonOpts;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct FlowcacheArgs {
    #[command(flatten)]
    pub common: CommonOpts,
}

pub fn run(_a: FlowcacheArgs) -> Result<()> {
    anyhow::bail!("flowplane bench flowcache is not built yet")
}
