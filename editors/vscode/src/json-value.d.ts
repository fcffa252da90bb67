// `protocol.generated.ts` names `JsonValue` (ts-rs's type for `serde_json::Value`) without
// declaring it. Until the generator emits it, this global declaration stands in.
type JsonValue = number | string | boolean | null | JsonValue[] | { [key: string]: JsonValue };
