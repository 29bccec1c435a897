//! `leased fencing sql` and `leased fencing redis-functions`: print the fencing adapters' files,
//! so that a user without the repository can apply them: `leased fencing sql | psql
//! "$DATABASE_URL"`, `leased fencing redis-functions | redis-cli -x FUNCTION LOAD REPLACE`.

use std::{io::Write, process::ExitCode};

use clap::{Args, Subcommand};

use super::exit_code;

/// `fencing/postgres/leased_fencing.sql`.
const POSTGRES_SQL: &str = include_str!("../../fencing/postgres/leased_fencing.sql");
/// `fencing/redis/leased_fencing.lua`.
const REDIS_FUNCTIONS: &str = include_str!("../../fencing/redis/leased_fencing.lua");

/// `leased fencing`.
#[derive(Args, Debug)]
pub struct FencingArgs {
    #[command(subcommand)]
    pub file: FencingFile,
}

/// Which adapter's file to print.
#[derive(Subcommand, Debug)]
pub enum FencingFile {
    /// Print the PostgreSQL adapter (leased.fence and the fencing_token guard): apply it once
    /// per database with `leased fencing sql | psql "$DATABASE_URL"`.
    Sql,
    /// Print the Redis Functions library leased_fencing (fenced SET, HSET, DEL): load it with
    /// `leased fencing redis-functions | redis-cli -x FUNCTION LOAD REPLACE`.
    RedisFunctions,
}

/// Prints the file; fails only if stdout does (a closed pipe).
pub(super) fn print(args: FencingArgs) -> ExitCode {
    let text = match args.file {
        FencingFile::Sql => POSTGRES_SQL,
        FencingFile::RedisFunctions => REDIS_FUNCTIONS,
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("leased fencing: cannot write to stdout: {error}");
            ExitCode::from(exit_code::ERROR)
        }
    }
}
