import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { decodeHeaderValue, encodeHeaderValue } from '../../lib/common/header-value';

describe('header values QueueBox writes from user data (X-QueueBox-Key, X-Causation-Id)', () => {
  it('sends visible ASCII as it is: nothing changes for keys that worked before', () => {
    for (const value of ['order-7', 'evt_1', '0b8e0f1e-58f7-4f6e-9a47-0c2b7a1b6a01', 'a b', "it's", '%41', 'x=1;y="2"', '~!#$&+^`|']) {
      assert.equal(encodeHeaderValue(value), value);
      assert.equal(decodeHeaderValue(value), value);
    }
  });

  it('sends anything else as RFC 8187 UTF-8, percent-encoded, and decodes it to the same string', () => {
    assert.equal(encodeHeaderValue('клиент-1'), "UTF-8''%D0%BA%D0%BB%D0%B8%D0%B5%D0%BD%D1%82-1");
    assert.equal(encodeHeaderValue('订单-7'), "UTF-8''%E8%AE%A2%E5%8D%95-7");
    assert.equal(encodeHeaderValue('line\nfeed'), "UTF-8''line%0Afeed");
    assert.equal(encodeHeaderValue(' padded '), "UTF-8''%20padded%20");
    for (const value of [
      'клиент-1',
      '订单-7',
      'cr\r\nlf',
      'tab\there',
      ' padded ',
      'café',
      'ÿ',
      '\ufeffbom first',
      'emoji 😀',
      'x\u007f',
      // Plain text that reads as the extended form is encoded too, so decoding never changes a key.
      "UTF-8''abc",
      "utf-8'en'abc",
      "UTF-8''%D0%BA",
    ]) {
      const sent = encodeHeaderValue(value);
      assert.match(sent, /^[!-~]+$/, `${JSON.stringify(value)} goes as visible ASCII: ${sent}`);
      assert.equal(decodeHeaderValue(sent), value);
      assert.ok(new Headers({ 'x-queuebox-key': sent }), 'fetch can send it');
    }
  });

  it('decodes any RFC 8187 UTF-8 value (any case, a language tag) and refuses bytes that are not UTF-8', () => {
    assert.equal(decodeHeaderValue("utf-8'ru'%d0%ba%d0%bb"), 'кл');
    assert.equal(decodeHeaderValue("UTF-8''"), '');
    assert.equal(decodeHeaderValue("UTF-8''%FF"), undefined);
    assert.equal(decodeHeaderValue("UTF-8''%ED%A0%80"), undefined, 'an encoded lone surrogate is not UTF-8');
    // Not of the form: taken as it is.
    assert.equal(decodeHeaderValue("ISO-8859-1''%E9"), "ISO-8859-1''%E9");
    assert.equal(decodeHeaderValue("UTF-8''a b"), "UTF-8''a b");
    assert.equal(decodeHeaderValue("UTF-8''%G1"), "UTF-8''%G1");
  });
});
