{ bench_realloc — seed 003's Reallocation demo in Free Pascal: append one
  character 10 million times to a string, a dynamic array and a
  TList<Char> (Generics.Collections), each without and with preallocation
  (SetLength / Capacity). One thread. }
program bench_realloc;

{$mode objfpc}{$H+}

uses
  {$ifdef MM_SHOAL} ShoalMM, {$endif}
  {$ifdef MM_CMEM} cmem, {$endif}
  {$ifdef unix} cthreads, UnixType, Linux, {$else} Windows, {$endif} SysUtils, Generics.Collections;

{$i benchutil.inc}

type
  TCharList = specialize TList<Char>;

var
  Chars: Int64;

procedure AppendString;
var
  s: string;
  i: Int64;
begin
  s := '';
  for i := 1 to Chars do
    s := s + '*';
  if Length(s) <> Chars then
    Halt(1);
end;

procedure SetLengthString;
var
  s: string;
  i: Int64;
begin
  SetLength(s, Chars);
  for i := 1 to Chars do
    s[i] := '*';
  if Length(s) <> Chars then
    Halt(1);
end;

procedure AppendArray;
var
  a: array of Char;
  i: Int64;
begin
  a := nil;
  for i := 1 to Chars do
  begin
    SetLength(a, Length(a) + 1);
    a[High(a)] := '*';
  end;
  if Length(a) <> Chars then
    Halt(1);
end;

procedure SetLengthArray;
var
  a: array of Char;
  i: Int64;
begin
  SetLength(a, Chars);
  for i := 1 to Chars do
    a[i - 1] := '*';
  if Length(a) <> Chars then
    Halt(1);
end;

procedure AppendList(Preallocate: Boolean);
var
  List: TCharList;
  i: Int64;
begin
  List := TCharList.Create;
  try
    if Preallocate then
      List.Capacity := Chars;
    for i := 1 to Chars do
      List.Add('*');
    if List.Count <> Chars then
      Halt(1);
  finally
    List.Free;
  end;
end;

procedure AppendListPlain;
begin
  AppendList(False);
end;

procedure AppendListCapacity;
begin
  AppendList(True);
end;

begin
  Chars := Scaled(10000000);
  Measure('realloc', 'string s := s + c', @AppendString);
  Measure('realloc', 'string, SetLength first', @SetLengthString);
  Measure('realloc', 'dynamic array, SetLength(a, n + 1)', @AppendArray);
  Measure('realloc', 'dynamic array, SetLength first', @SetLengthArray);
  Measure('realloc', 'TList<Char>.Add', @AppendListPlain);
  Measure('realloc', 'TList<Char>.Add, Capacity first', @AppendListCapacity);
end.
