//! PostgreSQL servers for the tests: found, initialised and started as the scripts
//! (scripts/pg-start.sh) did, as owned children.
