//! `flowplane bench setsep` (not built yet: owned by the issue that builds the crate).

use super::CommonOpts;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct SetsepArgs {
    #[command(flatten)]
    pub common: CommonOpts,
}

pub fn run(_a: SetsepArgs) -> Result<()> {
    anyhow::bail!("flowplane bench setsep is not built yet")
}
