import type { Knex } from 'knex';
import { control, runTransaction, type Db } from './transaction.js';

interface Member {
  work: (db: Db) => Promise<unknown>;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

/**
 * Group commit for SQLite: small writes started in the same turn of the event loop share one
 * transaction, and so one BEGIN, one COMMIT and one append of their pages to the WAL.
 *
 * SQLite has one writer and better-sqlite3 runs each statement synchronously, so twenty
 * refreshes in flight commit one after another, each writing its pages (a session's, the audit
 * table's and its indexes') although most are the same pages. A write joins the group that is
 * forming and is run, in the order it joined, when the loop reaches its check phase: after
 * every request read in this turn has had the chance to join. Each member runs inside its own
 * savepoint, so one that fails rolls back alone and only its caller sees the error; a failed
 * COMMIT fails every member, and nothing of theirs is written. A member's promise settles only
 * after the COMMIT, so nothing it wrote is reported before it is durable.
 *
 * A member's work must touch nothing but the database: it runs inside the transaction while
 * the other members wait for it. PostgreSQL commits concurrent transactions in groups by
 * itself and needs none of this.
 */
export class GroupCommit {
  private forming: Member[] = [];

  constructor(private readonly knex: Knex) {}

  run<T>(work: (db: Db) => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.forming.push({ work, resolve: resolve as (value: unknown) => void, reject });
      if (this.forming.length === 1) setImmediate(() => void this.commitForming());
    });
  }

  private async commitForming(): Promise<void> {
    const members = this.forming;
    this.forming = [];
    const outcomes: Array<{ value: unknown } | { error: unknown }> = [];
    try {
      await runTransaction(this.knex, 'sqlite', async (db) => {
        const connection = db.pinnedConnection!;
        for (const member of members) {
          await control('sqlite', connection, 'SAVEPOINT group_member');
          let outcome: { value: unknown } | { error: unknown };
          try {
            outcome = { value: await member.work(db) };
          } catch (error) {
            outcome = { error };
            await control('sqlite', connection, 'ROLLBACK TO group_member');
          }
          // A savepoint that cannot be ended fails the whole group (the transaction rolls back).
          await control('sqlite', connection, 'RELEASE group_member');
          outcomes.push(outcome);
        }
      });
    } catch (error) {
      for (const member of members) member.reject(error);
      return;
    }
    members.forEach((member, index) => {
      const outcome = outcomes[index]!;
      if ('error' in outcome) member.reject(outcome.error);
      else member.resolve(outcome.value);
    });
  }
}
