import type { MigrationInterface, QueryRunner } from 'typeorm';

/** The app's own table. Its timestamp sorts after QueueBoxSchema1764460800000, so it runs second. */
export class CreateOrdersTable1764547200000 implements MigrationInterface {
  readonly name = 'CreateOrdersTable1764547200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE TABLE orders (
  id uuid PRIMARY KEY,
  customer_id text NOT NULL,
  item text NOT NULL,
  amount_cents integer NOT NULL CHECK (amount_cents > 0),
  created_at timestamptz NOT NULL DEFAULT now()
)`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE orders');
  }
}
