//! Tool metadata: `.meta` parsing, variants, merging, command resolution and
//! discovery over `OLLIE_TOOLS_PATH`.
