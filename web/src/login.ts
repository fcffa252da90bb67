// The tab secret. The cookie alone reaches every server on 127.0.0.1 the browser visits
// (cookies are scoped by host, not port), so the API also wants a secret that only this origin
// holds: the login's redirect brings it in the address's fragment (a browser never sends a
// fragment to a server), and the page moves it into `localStorage` (scoped to the origin, port
// included) and takes it out of the address. The WebSocket presents it as its subprotocol
// `dsh.SECRET`, a `POST` in the `X-Dsh-Tab-Secret` header.

const KEY = "dsh.tabSecret";

/** Moves a secret the login put in the address into storage (once, before routing). */
export function takeSecret(): void {
  const match = /^#tab=([0-9a-f]{64})$/.exec(location.hash);
  if (match?.[1]) {
    localStorage.setItem(KEY, match[1]);
    history.replaceState(null, "", `${location.pathname}${location.search}`);
  }
}

/** This origin's tab secret, read at each use: a later login in another tab replaces it (and
 * the cookie) for every tab. */
export function tabSecret(): string | undefined {
  return localStorage.getItem(KEY) ?? undefined;
}

/** The WebSocket subprotocol that carries the secret. */
export function secretProtocol(secret: string): string {
  return `dsh.${secret}`;
}

/** The header a `POST` carries the secret in. */
export const SECRET_HEADER = "X-Dsh-Tab-Secret";
