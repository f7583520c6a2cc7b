//! Every limit the ledger enforces, by name. Each error that a limit causes names the limit.

/// Legs in one posting.
pub const MAX_LEGS: usize = 100;
/// Minimum legs in one posting.
pub const MIN_LEGS: usize = 2;
/// Bytes of a posting's memo or a void's reason.
pub const MAX_MEMO_BYTES: usize = 1024;
/// Entries in a metadata map.
pub const MAX_METADATA_ENTRIES: usize = 32;
/// Bytes of one metadata key.
pub const MAX_METADATA_KEY_BYTES: usize = 64;
/// Bytes of one metadata value.
pub const MAX_METADATA_VALUE_BYTES: usize = 512;
/// Largest page a List* call returns.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// Page size when the request leaves it at 0.
pub const DEFAULT_PAGE_SIZE: u32 = 100;
/// Bytes of an idempotency key.
pub const MAX_IDEMPOTENCY_KEY_BYTES: usize = 255;
/// Characters of an account code.
pub const MAX_ACCOUNT_CODE_CHARS: usize = 128;
/// Bytes of one decoded gRPC request.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;
/// Digits of one leg's amount in minor units (the integer part and the decimals together).
pub const MAX_AMOUNT_DIGITS: usize = 30;
/// Largest absolute value of an account's total debits or credits, in minor units (10^36).
pub const MAX_TOTAL_MINOR: i128 = 1_000_000_000_000_000_000_000_000_000_000_000_000;
/// Largest account scale (decimal places).
pub const MAX_SCALE: u32 = 18;
/// Bytes of a page token.
pub const MAX_PAGE_TOKEN_BYTES: usize = 512;
