// The service under a long mixed load (bench/soak.sh runs it; RELIABILITY.md has the
// results). Four scenarios at once, for DURATION:
//   searches  64 virtual users searching without pause (read key), over every service URL
//   mcp       4 users, each with an MCP session, calling `search` and `get_card` (read key)
//   review    1 user deciding contexts (accept, then edit) every 2 s (admin key)
//   ingest    1 user sending an ingest job of 5 small documents every 30 s and waiting
//             for it (admin key); the documents are replaced each round
// Every answer must be a success with the expected shape: the thresholds fail the run on
// one error.
//
// Environment: URLS (comma-separated service URLs), READ_KEY, ADMIN_KEY, DURATION (k6's
// form, 30m), QUERIES (a file of one query per line), WRITE_URL (where writes go; the
// first URL by default; empty: no writes, as against query nodes).
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';

const URLS = (__ENV.URLS || 'http://127.0.0.1:7700').split(',');
const WRITE_URL = __ENV.WRITE_URL === undefined ? URLS[0] : __ENV.WRITE_URL;
const READ = { headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${__ENV.READ_KEY}` } };
const ADMIN = { headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${__ENV.ADMIN_KEY}` } };
const DURATION = __ENV.DURATION || '30m';
const QUERIES = open(__ENV.QUERIES).split('\n').filter((l) => l.trim().length > 0);

const scenarios = {
  searches: { executor: 'constant-vus', vus: 64, duration: DURATION, exec: 'searches' },
  mcp: { executor: 'constant-vus', vus: 4, duration: DURATION, exec: 'mcp' },
};
if (WRITE_URL) {
  scenarios.review = { executor: 'constant-vus', vus: 1, duration: DURATION, exec: 'review' };
  scenarios.ingest = { executor: 'constant-vus', vus: 1, duration: DURATION, exec: 'ingest' };
}

export const options = {
  scenarios,
  thresholds: {
    http_req_failed: ['rate==0'],
    checks: ['rate==1'],
  },
  summaryTrendStats: ['avg', 'p(50)', 'p(95)', 'p(99)', 'max'],
};

function pick(list) {
  return list[Math.floor(Math.random() * list.length)];
}

export function searches() {
  const url = URLS[exec.vu.idInTest % URLS.length];
  const r = http.post(`${url}/v1/search`, JSON.stringify({ query: pick(QUERIES), k: 10 }), READ);
  check(r, { 'search answered': (x) => x.status === 200 && Array.isArray(x.json('hits')) });
}

function mcpMessage(r) {
  const ct = r.headers['Content-Type'] || '';
  if (ct.startsWith('text/event-stream')) {
    for (const line of r.body.split('\n')) {
      // The stream opens with an empty `data:` (a priming event): skip what is not JSON.
      const data = line.startsWith('data:') ? line.slice(5).trim() : '';
      if (data.startsWith('{')) {
        const v = JSON.parse(data);
        if (v.id !== undefined) return v;
      }
    }
    return null;
  }
  return JSON.parse(r.body);
}

let session = null;
let rpc = 10;

export function mcp() {
  const url = URLS[exec.vu.idInTest % URLS.length];
  const headers = Object.assign({ Accept: 'application/json, text/event-stream' }, READ.headers);
  if (session === null) {
    const init = http.post(`${url}/mcp`, JSON.stringify({
      jsonrpc: '2.0', id: 1, method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'soak', version: '0' } },
    }), { headers });
    check(init, { 'mcp initialized': (x) => x.status === 200 });
    session = init.headers['Mcp-Session-Id'];
    http.post(`${url}/mcp`, JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }),
      { headers: Object.assign({ 'Mcp-Session-Id': session }, headers), responseCallback: http.expectedStatuses(200, 202) });
  }
  const h = { headers: Object.assign({ 'Mcp-Session-Id': session }, headers) };
  rpc += 1;
  const s = http.post(`${url}/mcp`, JSON.stringify({
    jsonrpc: '2.0', id: rpc, method: 'tools/call', params: { name: 'search', arguments: { query: pick(QUERIES), k: 5 } },
  }), h);
  const found = mcpMessage(s);
  const ok = check(s, { 'mcp search answered': () => s.status === 200 && found && found.result && !found.result.isError });
  if (!ok) return;
  const hits = JSON.parse(found.result.content[0].text).hits || [];
  if (hits.length > 0) {
    rpc += 1;
    const c = http.post(`${url}/mcp`, JSON.stringify({
      jsonrpc: '2.0', id: rpc, method: 'tools/call', params: { name: 'get_card', arguments: { chunk_id: hits[0].chunk_id } },
    }), h);
    const card = mcpMessage(c);
    check(c, { 'mcp get_card answered': () => c.status === 200 && card && card.result && !card.result.isError });
  }
  sleep(0.2);
}

export function review() {
  const page = http.get(`${WRITE_URL}/v1/contexts?limit=50`, READ);
  check(page, { 'review queue listed': (x) => x.status === 200 });
  const items = page.json('contexts') || [];
  if (items.length > 0) {
    const item = pick(items);
    const id = encodeURIComponent(item.chunk_id).replace(/%2F/g, '/');
    // Accepting needs a context to accept; a card without one gets an edit.
    const body = item.generated_context && Math.random() < 0.5
      ? { decision: 'accept' }
      : { decision: 'edit', text: `Reviewed during the soak at ${new Date().toISOString()}.` };
    const r = http.post(`${WRITE_URL}/v1/contexts/${id}`, JSON.stringify(body), ADMIN);
    check(r, { 'decision taken': (x) => x.status === 200 || x.status === 202 });
  }
  sleep(2);
}

export function ingest() {
  const round = exec.scenario.iterationInTest;
  const texts = [];
  for (let i = 0; i < 5; i++) {
    texts.push({
      id: `soak/doc-${i}.md`,
      text: `# Soak document ${i}\n\nRound ${round}: the valve at depot ${i} was serviced after ${100 + round} cycles.\n\n## Notes\n\nNothing else happened in round ${round}.\n`,
    });
  }
  const r = http.post(`${WRITE_URL}/v1/jobs`, JSON.stringify({ kind: 'ingest', texts }), ADMIN);
  if (!check(r, { 'ingest job queued': (x) => x.status === 202 })) return;
  const id = r.json('id');
  for (let i = 0; i < 600; i++) {
    const s = http.get(`${WRITE_URL}/v1/jobs/${id}`, ADMIN);
    const state = s.json('state');
    if (state === 'succeeded' || state === 'failed' || state === 'cancelled') {
      check(s, { 'ingest job succeeded': () => state === 'succeeded' });
      break;
    }
    sleep(0.5);
  }
  sleep(30);
}
