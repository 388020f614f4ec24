// Jest 30 over the tsc output of this folder (npm run example:jest compiles it to examples/.build):
// ts-jest does not accept TypeScript 7, and tsc keeps the decorator metadata Nest injects by.
module.exports = {
  rootDir: '../.build/jest',
  testMatch: ['**/*.e2e.test.js'],
  testEnvironment: 'node',
  // One database per run, made by the test itself; a generous bound only to stop a hang.
  testTimeout: 60_000,
};
