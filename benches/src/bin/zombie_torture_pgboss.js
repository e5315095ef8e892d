// The zombie torture's pg-boss worker (see zombie_torture.rs): pg-boss 10
// as its users run it, a job with expireInSeconds, the read-modify-write
// of the shared row and file unguarded (pg-boss has nothing to guard them
// with). Speaks the torture's line protocol on stdin and stdout.
// Needs `npm install pg-boss@10 pg` in ZT_NODE_DIR (NODE_PATH points there).
const PgBoss = require('pg-boss');
const { Client } = require('pg');
const fs = require('fs');
const path = require('path');
const readline = require('readline');

const url = process.env.ZT_PG;
const dir = process.env.ZT_DIR;
const role = process.env.ZT_ROLE;
const queue = 'zombie_torture';
const system = 'pg-boss';
const file = path.join(dir, system + '.txt');

async function main() {
  // Maintenance every second (the least pg-boss allows): it is what moves
  // an expired job back to be fetched again.
  const boss = new PgBoss({ connectionString: url, max: 2, schedule: false, maintenanceIntervalSeconds: 1 });
  boss.on('error', () => {});
  await boss.start();
  if (role === 'A') await boss.createQueue(queue).catch(() => {});
  const db = new Client({ connectionString: url });
  await db.connect();
  let job = null;
  const rl = readline.createInterface({ input: process.stdin });
  for await (const line of rl) {
    const [verb, r] = line.trim().split(/\s+/);
    let answer = 'ok';
    if (verb === 'acquire') {
      if (role === 'A') await boss.send(queue, { r: +r }, { expireInSeconds: 1, retryLimit: 5, retryDelay: 0 });
      const until = Date.now() + 60000;
      job = null;
      while (!job && Date.now() < until) {
        const jobs = await boss.fetch(queue, { batchSize: 1 });
        if (jobs && jobs.length && jobs[0].data.r === +r) job = jobs[0];
        else await new Promise(res => setTimeout(res, 20));
      }
      answer = job ? 'acquired ' + job.id : 'error never fetched the job';
    } else if (verb === 'write') {
      const tag = r + ':' + role;
      const got = await db.query('SELECT value FROM zt_rows WHERE system = $1', [system]);
      const v = got.rows.length ? +got.rows[0].value : 0;
      await db.query('INSERT INTO zt_rows VALUES ($1, $2, $3) ON CONFLICT (system) DO UPDATE SET value = $2, writer = $3', [system, v + 1, tag]);
      let fv = 0;
      try { fv = +fs.readFileSync(file, 'utf8').split(/\s+/)[0] || 0; } catch (e) {}
      fs.writeFileSync(file, (fv + 1) + ' ' + tag + '\n');
      answer = 'row=ok file=ok';
    } else if (verb === 'look') {
      const got = await db.query('SELECT writer FROM zt_rows WHERE system = $1', [system]);
      let fw = '';
      try { fw = fs.readFileSync(file, 'utf8').split(/\s+/)[1] || ''; } catch (e) {}
      answer = 'row=' + (got.rows.length ? got.rows[0].writer : '') + ' file=' + fw;
    } else if (verb === 'done') {
      if (job) await boss.complete(queue, job.id).catch(() => {});
      job = null;
    }
    process.stdout.write(answer + '\n');
  }
  await boss.stop({ graceful: false, wait: false });
  process.exit(0);
}

main().catch(e => { process.stdout.write('error ' + String(e).replace(/\n/g, ' ') + '\n'); process.exit(1); });
