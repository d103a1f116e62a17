import type { Knex } from 'knex';
import type { TableNames } from '../table-names.js';

/*
 * Issue 10: event data never holds an e-mail address. `member.invited` events written before
 * this release carried the invitee's address in `data.email`; it is removed (the event keeps
 * `invite_id`). Schema unchanged.
 */
export function up(table: TableNames) {
  return async (knex: Knex): Promise<void> => {
    const BATCH = 500;
    let afterSeq = -1;
    for (;;) {
      const rows: Array<{ seq: number | string; data: string }> = await knex(table.auditEvents)
        .where({ type: 'member.invited' })
        .andWhere('seq', '>', afterSeq)
        .orderBy('seq')
        .limit(BATCH)
        .select('seq', 'data');
      if (rows.length === 0) return;
      for (const row of rows) {
        const data = JSON.parse(String(row.data)) as Record<string, unknown>;
        if ('email' in data) {
          delete data.email;
          await knex(table.auditEvents).where({ seq: row.seq }).update({ data: JSON.stringify(data) });
        }
      }
      afterSeq = Number(rows[rows.length - 1]!.seq);
    }
  };
}
